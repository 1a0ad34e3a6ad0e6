"""roi_align (ONNX RoiAlign) -> one kernel (backends/cpu/templates/roi_align.cpp.j2): a parallel
loop over (roi, channel); the grid and the bins are template constants unless sampling_ratio is
0 (then the grid follows each roi at run time). d = [N, C, H, W, R]."""
from __future__ import annotations

from ....ir.op import Op, OpKind
from ...cexpr import STORAGE, load, store
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec


@lowering("cpu", OpKind.ROI_ALIGN)
def lower_roi_align(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, rois, bi = op.inputs
    (y,) = op.outputs
    a = op.attrs
    label = "roi_align" + (f" '{op.name}'" if op.name else "")
    # The template writes the label as an escaped literal (`| cstr`): op names are user text.
    spec = KernelSpec.make(ctx.template("roi_align.cpp.j2"), mode=a.mode, half_pixel=a.half_pixel, out_h=a.out_h,
                           out_w=a.out_w, sampling_ratio=a.sampling_ratio, spatial_scale=repr(float(a.spatial_scale)),
                           t=STORAGE[x.dtype], load=load(x.dtype, "x", "i"), store=store(x.dtype, "v"), label=label)
    return [KernelCall(spec, [y, x, rois, bi], list(x.shape) + [rois.shape[0]], op.name or op.kind.value)]
