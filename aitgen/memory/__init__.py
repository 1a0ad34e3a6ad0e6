"""Memory planning, the stage between the passes and lowering: every intermediate tensor gets an
offset in one activation arena.

Over the schedule (graph.ops in order; step i runs graph.ops[i]) each tensor lives from the step
that writes it to the last step that reads it, both inclusive: an op reads its operands while it
writes its results, so an operand that dies at step i still overlaps the results born there.

Storage is shared in three ways before any offset is chosen:
- views: a RESHAPE moves no data, so its output lives in its input's bytes; chains of views resolve
  to the first tensor (the root), and the root's buffer lives until the last read of any view.
  A view class that touches a user buffer (graph input, constant, graph output) is not in the arena.
- in place: an element-wise op may write its result over an operand that dies at that op when the
  operand is not broadcast (same shape, same byte size), so element i is read before it is written.
  So may each member of a grouped element-wise op, over an operand no other member reads; never
  over an operand read through a strided view (element i of it is elsewhere).
- concat in place: when a concat's output Y is an intermediate whose parts are contiguous slices
  (every dim before the axis is a static 1, every part but the last has a static size, and each
  slice starts ALIGN-aligned), a computed part X_i gets no buffer of its own: its producer
  writes it straight into Y's bytes at its slice, and the concat copies only the other parts
  (graph inputs, constants, a part that is a view of a user buffer or already a slice of another
  concat), or nothing at all. Y's buffer then lives from the first of its parts' writes;
  concats nest (a part that is itself a concat places its own parts at its slice). In
  concat.py.

Buffers are sized at the upper bound of every dynamic dim, rounded up to ALIGN bytes, so every
offset is ALIGN-aligned. Offsets come from several greedy heuristics (greedy by size first, as in
TFLite's and Pisarchyk & Lee's "greedy by size for offset calculation"); the smallest arena wins.
plan_memory(graph, caps) returns a MemoryPlan, which compile_model hands to lowering and the
program; check_plan verifies one from the graph alone, without trusting the planner's own
bookkeeping.
"""
from .check import check_plan
from .plan import ALIGN, Buffer, MemoryPlan, align, in_place_candidates, is_view, plan_memory, view_classes

__all__ = ["ALIGN", "Buffer", "MemoryPlan", "align", "check_plan", "in_place_candidates", "is_view", "plan_memory",
           "view_classes"]
