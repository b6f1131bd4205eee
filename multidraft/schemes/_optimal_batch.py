"""The batched optimal verifier for iid drafts: ``select_batch`` of the ``optimal`` scheme.

Rows ``target [B, n]``, draft distributions ``q [B, n]`` and draft tokens ``[B, K]``. Each row's
rule is fitted on the host in float64 on the draft's support
(:func:`multidraft.theory.verifier.fit_support_rule`); what the host needs of a row is its
*compact form*: the support's token ids, p and q there, the row totals, the target mass outside
the support and, for rows whose residual draw falls there, a draw from p outside the support.

* **On the CPU** the rows are numpy views of the tensors (no copy for float64) and the compact
  forms are cut from them directly.
* **On a device** the compact forms are gathered there (the ``width`` largest draft
  probabilities by ``topk``, which hold the whole support when it has at most ``width``
  tokens; the masked sums; one inverse-CDF draw from p outside the support per row) and come
  to the host in **one** transfer, with the tokens and the uniforms; the chosen tokens go back
  in one. Only rows whose support is wider than ``width`` (full-support drafts) need a second
  transfer, of their dense rows.

Rows with the same compact form share one fit (decoding repeats a node's distributions across
the rows of a tree). Randomness: ``K + 3`` uniforms per row from the caller's generator (K
positions, the acceptance, the residual's split, the draw outside the support).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from multidraft.theory.verifier import OutsideTarget, fit_support_rule

__all__ = ["select_batch_iid", "CompactRow", "host_rows", "device_rows", "on_host"]

#: Draft support width gathered on a device in the single transfer (wider rows come dense).
DEVICE_WIDTH = 1024
#: Support size above which distinct rows are fitted in threads (the fits release the GIL).
_THREADED_SUPPORT = 4096


@dataclass
class CompactRow:
    """One row on the host: ``support`` (ascending token ids), ``ps``, ``qs`` (p and q there,
    normalised by the row totals), ``outside`` (normalised p outside the support), and either
    the dense ``target`` row at any positive scale (CPU) or one pre-drawn token
    ``outside_draw`` from p outside the support (device; -1 when that mass is zero)."""

    support: np.ndarray
    ps: np.ndarray
    qs: np.ndarray
    outside: float
    target: np.ndarray | None = None
    outside_draw: int = -1

    def key(self) -> tuple:
        """A cheap hashable digest of what the fit depends on (a strided sample of the
        support's arrays): equal rows have equal keys; :meth:`same` settles a match exactly."""
        stride = max(1, len(self.support) // 64)
        return (self.outside, len(self.support), *(a[::stride].tobytes() for a in (self.support, self.ps, self.qs)))

    def same(self, other: CompactRow) -> bool:
        """Whether the fit of ``other`` is this row's fit (equal support, p, q and outside mass)."""
        return self.outside == other.outside and all(
            np.array_equal(a, b) for a, b in ((self.support, other.support), (self.ps, other.ps), (self.qs, other.qs))
        )


def host_rows(p_rows: np.ndarray, q_rows: np.ndarray) -> list[CompactRow]:
    """Compact forms of rows on the host (float32 or float64; read in float64 one row at a
    time, not as a converted copy of the whole block), normalised by the row totals; the dense
    target row is kept as it is (only draws outside the support read it, and they do not depend
    on its scale), so a sparse float64 row costs a few passes over it and no dense copy."""
    rows = []
    for p, q in zip(p_rows, q_rows):
        p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
        p_total, q_total = float(p.sum()), float(q.sum())
        proposed = q > 0
        support = np.flatnonzero(proposed)
        if len(support) == len(q):
            dense = p / p_total
            rows.append(CompactRow(support, dense, q / q_total, 0.0, target=dense))
            continue
        outside = float(p.sum(where=~proposed)) / p_total  # summed directly: exactly 0 when p lives on the support
        rows.append(CompactRow(support, p[support] / p_total, q[support] / q_total, outside, target=p))
    return rows


def device_rows(target, q, tokens, uniforms, width: int = DEVICE_WIDTH):
    """Compact forms gathered on the tensors' device and brought over in one transfer with the
    draft ``tokens [B, K]`` and the ``uniforms [B, K + 3]`` (a second transfer, dense, only for
    rows with more than ``width`` support tokens). The last uniform of each row draws its
    token from p outside the support.

    Returns ``(rows, tokens, uniforms)``: the list of :class:`CompactRow` (``outside_draw``
    set, no dense target) and the tokens (int64) and uniforms (float64) as numpy arrays."""
    import torch

    p64, q64 = target.double(), q.double()
    outside_uniform = uniforms[:, -1]
    n = p64.shape[1]
    width = min(width, n)
    support = q64 > 0
    outside_weights = torch.where(support, torch.zeros_like(p64), p64)
    cumulative = outside_weights.cumsum(dim=1)
    outside = cumulative[:, -1:]
    level = torch.minimum(outside_uniform[:, None].double() * outside, torch.nextafter(outside, torch.zeros_like(outside)))
    draw = torch.searchsorted(cumulative, level, right=True).clamp(max=n - 1)
    draw = torch.where(outside > 0, draw, torch.full_like(draw, -1))
    q_top, ids = torch.topk(q64, width, dim=1)
    packet = torch.cat(
        [
            p64.sum(dim=1, keepdim=True), q64.sum(dim=1, keepdim=True), outside, support.sum(dim=1, keepdim=True).double(),
            draw.double(), ids.double(), p64.gather(1, ids), q_top, tokens.double(), uniforms.double(),
        ],
        dim=1,
    ).cpu().numpy()  # fmt: skip
    p_total, q_total, outside_mass, count, draws = (packet[:, i] for i in range(5))
    ids, p_top, q_top = (packet[:, 5 + i * width : 5 + (i + 1) * width] for i in range(3))
    k = tokens.shape[1]  # token ids (< 2**53) travel exactly as doubles
    host_tokens, host_uniforms = packet[:, 5 + 3 * width : 5 + 3 * width + k].astype(np.int64), packet[:, 5 + 3 * width + k :]
    wide = np.flatnonzero(count > width)
    dense = {}
    if len(wide):
        index = torch.as_tensor(wide, device=target.device)
        dense = dict(zip(wide.tolist(), host_rows(p64[index].cpu().numpy(), q64[index].cpu().numpy())))
    rows = []
    for b in range(len(packet)):
        if b in dense:
            rows.append(dense[b])
            continue
        s = int(count[b])
        order = np.argsort(ids[b, :s])
        support = ids[b, :s][order].astype(np.int64)
        rows.append(
            CompactRow(support, p_top[b, :s][order] / p_total[b], q_top[b, :s][order] / q_total[b], outside_mass[b] / p_total[b], outside_draw=int(draws[b]))
        )
    return rows, host_tokens, host_uniforms


def on_host(tensor) -> bool:
    """Whether ``tensor``'s rows are read on the host as numpy views (the CPU) rather than
    gathered on its device first (:func:`device_rows`)."""
    return tensor.device.type == "cpu"


def _numpy_rows(tensor) -> np.ndarray:
    """A CPU tensor's rows as a numpy view (float32 and float64; other dtypes converted)."""
    import torch

    return tensor.numpy() if tensor.dtype in (torch.float32, torch.float64) else tensor.double().numpy()


def select_batch_iid(target, drafts, tokens, generator, k: int):
    """``(output [B], accepted [B])`` of the optimal verifier on iid drafts (module docstring);
    inputs already checked, ``drafts[:, 0]`` is each row's q."""
    import torch

    from multidraft.schemes import _torch

    batch, n = target.shape
    uniforms = _torch.uniforms((batch, k + 3), target, generator).double()
    if on_host(target):
        rows = host_rows(_numpy_rows(target), _numpy_rows(drafts[:, 0]))
        host_tokens, host_uniforms = tokens.numpy(), uniforms.numpy()
    else:
        rows, host_tokens, host_uniforms = device_rows(target, drafts[:, 0], tokens, uniforms)
    output = run_rows(rows, host_tokens, host_uniforms, n, k)
    result = torch.as_tensor(output, device=target.device)
    return result, (tokens == result[:, None]).any(dim=1)


def run_rows(rows: list[CompactRow], tokens: np.ndarray, uniforms: np.ndarray, n: int, k: int) -> np.ndarray:
    """The output token of every row: one fit per distinct compact form, then
    :meth:`~multidraft.theory.verifier.CurtainRule.run` on its rows, then the draws outside the
    support (from the dense row, or the pre-drawn token)."""
    candidates: dict[tuple, list[list[int]]] = {}
    for b, row in enumerate(rows):
        bucket = candidates.setdefault(row.key(), [])
        match = next((group for group in bucket if rows[group[0]].same(row)), None)
        if match is None:
            bucket.append([b])
        else:
            match.append(b)
    groups = [group for bucket in candidates.values() for group in bucket]
    output = np.empty(len(rows), dtype=np.int64)

    def verify(indices: list[int]) -> None:
        first = rows[indices[0]]
        rule = fit_support_rule(first.ps, first.qs, first.support, n, k, outside_mass=first.outside)
        chosen = rule.run(tokens[indices], uniforms[indices, : k + 2])
        for i, b in enumerate(indices):
            if chosen[i] < 0:
                row = rows[b]
                if row.target is None:
                    chosen[i] = row.outside_draw
                else:
                    chosen[i] = OutsideTarget(row.target, row.support).draw(uniforms[b, k + 2 :])[0]
        output[indices] = chosen

    heavy = max(len(rows[g[0]].support) for g in groups) > _THREADED_SUPPORT
    if heavy and len(groups) > 1:
        with ThreadPoolExecutor(max_workers=min(len(groups), os.cpu_count() or 1)) as pool:
            list(pool.map(verify, groups))
    else:
        for group in groups:
            verify(group)
    return output
