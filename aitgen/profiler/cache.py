"""The profiler's results: an sqlite file of (key -> winning config, its time).

A key names everything the winner depends on: the op kind, the epilogue's signature (its
expression and how each operand is read), operand and result dtypes, layouts, the shape bucket,
the arch, the kernel library's version (CUTLASS's; Composable Kernel's pinned commit on ROCm) and
the backend. A new pin or a different epilogue is a new key, never a stale answer. The backend that uses it names the file (the CUDA backend's default: beside its
object cache, codegen/kernels/cuda/configs.py), so every build on a machine shares what was measured.
"""
from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from pathlib import Path
from typing import Optional, Union

_SCHEMA = """CREATE TABLE IF NOT EXISTS profile (
    key TEXT PRIMARY KEY,      -- ProfileKey.text(): sorted JSON of the fields
    op TEXT NOT NULL,          -- the key's fields again, for humans and ad-hoc queries
    arch TEXT NOT NULL,
    config TEXT NOT NULL,      -- the winner, GemmConfig.as_params() as JSON
    time_ms REAL NOT NULL,     -- its median time per run
    created REAL NOT NULL      -- unix time
)"""


@dataclasses.dataclass(frozen=True)
class ProfileKey:
    op: str              # "gemm" | "bmm" | "conv2d" | "grouped_gemm"
    epilogue: str        # str(Expr) + load kinds, "" for none
    dtypes: str          # "a,b->out"
    layouts: str         # "rcr", conv: "nhwc/ohwi s1x1 p1111 d1x1"
    bucket: str          # the problem at the bucket's size: "m=512,n=768,k=768,l=1"
    arch: str
    cutlass: str         # the kernel library's version: CUTLASS's, or "ck-<commit>" (ROCm's CK pin)
    backend: str = "cuda"

    def text(self) -> str:
        d = dataclasses.asdict(self)
        if d["backend"] == "cuda":   # keys written before the field existed (all CUDA's) stay valid
            del d["backend"]
        return json.dumps(d, sort_keys=True)


class ProfileCache:
    """One sqlite file; every call opens its own connection, so threads and processes may share it."""

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.path, timeout=30)
        con.execute(_SCHEMA)
        return con

    def get(self, key: ProfileKey) -> Optional[tuple[dict, float]]:
        """(config params, time in ms) of the winner, or None. A missing file is an empty cache
        (and is not created by a lookup)."""
        if not self.path.exists():
            return None
        con = self._connect()
        try:
            row = con.execute("SELECT config, time_ms FROM profile WHERE key = ?", (key.text(),)).fetchone()
        finally:
            con.close()
        return (json.loads(row[0]), float(row[1])) if row else None

    def put(self, key: ProfileKey, config: dict, time_ms: float) -> None:
        con = self._connect()
        try:
            with con:
                con.execute("INSERT OR REPLACE INTO profile VALUES (?, ?, ?, ?, ?, ?)",
                            (key.text(), key.op, key.arch, json.dumps(config, sort_keys=True), float(time_ms),
                             time.time()))
        finally:
            con.close()

    def __len__(self) -> int:
        if not self.path.exists():
            return 0
        con = self._connect()
        try:
            return con.execute("SELECT COUNT(*) FROM profile").fetchone()[0]
        finally:
            con.close()
