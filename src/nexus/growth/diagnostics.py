"""Growth diagnostics (SPARKLING): activation RMS ratio per layer, loss jump, symmetry lock.

* `rms_ratio_report(old, new, vocab)`: on a probe batch, RMS of the residual stream after the
  embedding and after every block, grown / original (1.0 = signal preserved, Eq. 3), and the probe
  loss before and after (the loss jump at growth).
* `symmetry_lock(model, param_maps)`: cosine similarity between every copied channel and the
  channel it was copied from (1.0 = still locked together).
* `PostGrowthMonitor`, a trainer hook callback kept by `training.GrowthHook` after a growth, logs both over the
  post-growth steps (SPARKLING Sec. 4.1 and Fig. 4 / App. C): the symmetry lock (copy init only) and
  the per-layer activation RMS ratio of the grown model on a fixed probe batch against the model
  just before growth on the same batch. `state_dict` / `from_state_dict` carry it through a checkpoint,
  so a resumed run logs the same values.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .param_map import ParamMap


def probe_batch(vocab_size: int, batch: int = 4, seq_len: int = 64) -> torch.Tensor:
    """Deterministic probe ids: bytes of the embedded corpus (real text for the byte tokenizer),
    clamped into the vocabulary so any tokenizer gets valid ids."""
    try:  # the first topics of the embedded corpus, without building all of it (that takes seconds)
        from pydoc_data.topics import topics

        text = "\n".join(t for _, t in sorted(topics.items())[:20]).encode("utf-8", "replace")
    except ImportError:
        from ..data.corpus import embedded_documents

        text = "\n".join(embedded_documents()[:20]).encode("utf-8", "replace")
    need = batch * (seq_len + 1)
    ids = torch.tensor(list(text[:need]) + [32] * max(need - len(text), 0), dtype=torch.long)
    return ids.clamp_(max=vocab_size - 1).view(batch, seq_len + 1)


def _streams_and_loss(model, ids: torch.Tensor):
    with torch.no_grad():  # a block, not a decorator: mutmut does not mutate decorated functions
        was = model.training
        model.eval()
        x, y = ids[:, :-1], ids[:, 1:]
        out = model(x, labels=y, return_hidden=True)
        model.train(was)
        rms = [float(h.float().pow(2).mean().sqrt()) for h in out.hidden_states]
        return rms, float(out.ce_loss)


def stream_pairs(param_maps: dict, n_old: int, n_new: int) -> list[tuple[int, int]]:
    """(old, new) indices of the residual streams (0: after the embedding, i: after block i-1) to compare.
    Same depth: each with itself. A growth that added blocks (depth growth) moved old block j to the new
    position its tensors now have (read from the param maps by name); old stream j (the input of old block j)
    is compared with the input of that block's new position, and the old final stream with the new final one,
    so blocks inserted between old ones are judged by what reaches the next old block."""
    if n_old == n_new:
        return [(i, i) for i in range(n_old)]
    moved = {}
    for name, pm in param_maps.items():
        a, b = _layer_of(name), _layer_of(pm.old_name)
        if a is not None and b is not None:
            moved[b] = a
    return [(0, 0)] + [(j, moved.get(j, n_new - 1)) for j in range(1, n_old - 1)] + [(n_old - 1, n_new - 1)]


def _layer_of(name: str | None) -> int | None:
    parts = (name or "").split(".")
    return int(parts[1]) if len(parts) > 2 and parts[0] == "layers" and parts[1].isdigit() else None


def rms_ratio_report(
    old_model, new_model, vocab_size: int, ids: torch.Tensor | None = None, pairs: list[tuple[int, int]] | None = None
) -> dict:
    """pairs: (old, new) stream indices to compare (`stream_pairs`; default: each with itself)."""
    dev = next(new_model.parameters()).device
    ids = (probe_batch(vocab_size) if ids is None else ids).to(dev)
    seq = min(ids.shape[1], old_model.cfg.max_seq_len + 1, new_model.cfg.max_seq_len + 1)
    ids = ids[:, :seq]
    rms_old, loss_old = _streams_and_loss(old_model, ids)
    rms_new, loss_new = _streams_and_loss(new_model, ids)
    pairs = pairs or [(i, i) for i in range(min(len(rms_old), len(rms_new)))]
    ratios = [rms_new[b] / max(rms_old[a], 1e-12) for a, b in pairs]
    return {
        "rms_ratio_per_layer": [round(r, 4) for r in ratios],
        "rms_ratio_max_dev": round(max(abs(r - 1) for r in ratios), 4),
        "probe_loss_before": round(loss_old, 4),
        "probe_loss_after": round(loss_new, 4),
        "loss_jump": round(loss_new - loss_old, 4),
    }


def copied_channel_cosines(w: torch.Tensor, dim: int, src: torch.Tensor) -> torch.Tensor:
    """Cosine between slice i and slice src[i] along `dim`, for every copied (new) index i."""
    with torch.no_grad():  # a block, not a decorator: mutmut does not mutate decorated functions
        n_old = int((src == torch.arange(len(src), device=src.device)).sum()) if len(src) else 0
        new_idx = torch.arange(n_old, len(src), device=w.device)
        if len(new_idx) == 0:
            return torch.empty(0)
        a = w.index_select(dim, new_idx).movedim(dim, 0).reshape(len(new_idx), -1).float()
        b = w.index_select(dim, src.to(w.device)[new_idx]).movedim(dim, 0).reshape(len(new_idx), -1).float()
        return F.cosine_similarity(a, b, dim=1, eps=1e-12)


def symmetry_lock(model, param_maps: dict) -> dict:
    """{"mean": ..., "min": ..., "per_param": {name: mean cosine}} over every copy-initialized axis."""
    params = dict(model.named_parameters())
    per = {}
    for name, pm in param_maps.items():
        if not pm.copy_source or name not in params:
            continue
        w = params[name]
        if hasattr(w, "full_tensor"):  # FSDP2 shard: gather the whole matrix (every rank runs this callback)
            w = w.full_tensor()
        vals = [copied_channel_cosines(w, d, src) for d, src in pm.copy_source.items() if len(src) == w.shape[d]]
        vals = [v for v in vals if v.numel()]
        if vals:
            per[name] = float(torch.cat(vals).mean())
    if not per:
        return {}
    return {"mean": sum(per.values()) / len(per), "min": min(per.values()), "per_param": per}


def residual_rms(model, ids: torch.Tensor) -> list[float]:
    """RMS of the residual stream after the embedding and after every block on `ids`."""
    dev = next(model.parameters()).device
    return _streams_and_loss(model, ids.to(dev))[0]


class PostGrowthMonitor:
    """Trainer callback: logs the symmetry-lock metric (when channels were copied) and the per-layer
    activation RMS ratio against the pre-growth model (`base_rms` on `probe`) every `every` logged steps."""

    def __init__(
        self,
        param_maps: dict,
        probe: torch.Tensor | None = None,
        base_rms: list[float] | None = None,
        every: int = 1,
        pairs: list[tuple[int, int]] | None = None,
    ):
        self.param_maps, self.every, self.calls = param_maps, every, 0
        self.pairs = pairs  # (old, new) stream indices compared (stream_pairs); None: each with itself
        self.probe, self.base_rms = probe, base_rms
        self.has_copies = any(pm.copy_source for pm in param_maps.values())

    def __call__(self, trainer, step: int, metrics: dict) -> None:
        self.calls += 1
        if self.calls % self.every:
            return
        rec: dict[str, object] = {}
        if self.has_copies:
            lock = symmetry_lock(trainer.model, self.param_maps)
            if lock:
                rec.update(symmetry_lock_mean=round(lock["mean"], 6), symmetry_lock_min=round(lock["min"], 6))
        if self.probe is not None and self.base_rms:
            now = residual_rms(trainer.model, self.probe)
            pairs = self.pairs or [(i, i) for i in range(min(len(self.base_rms), len(now)))]
            ratios = [now[b] / max(self.base_rms[a], 1e-12) for a, b in pairs]
            rec.update(
                rms_ratio_per_layer=[round(x, 4) for x in ratios],
                rms_ratio_max_dev=round(max(abs(x - 1) for x in ratios), 4),
            )
        if rec:
            trainer.log({"step": step, **rec})

    def state_dict(self) -> dict:
        """What a resumed run needs to log the values this monitor would have logged: the probe ids, the
        pre-growth RMS and the copy sources. Each distinct index tensor is stored once: every parameter
        along a grown axis carries its own copy of that axis's map, and one per axis keeps the state small."""
        sources: list[torch.Tensor] = []
        copy_source: dict[str, dict[int, int]] = {}
        for name, pm in self.param_maps.items():
            for dim, src in (pm.copy_source or {}).items():
                src = src.detach().cpu()
                j = next((i for i, s in enumerate(sources) if s.shape == src.shape and torch.equal(s, src)), None)
                if j is None:
                    sources.append(src)
                    j = len(sources) - 1
                copy_source.setdefault(name, {})[int(dim)] = j
        return {
            "probe": None if self.probe is None else self.probe.detach().cpu(),
            "base_rms": None if self.base_rms is None else [float(x) for x in self.base_rms],
            "every": self.every,
            "calls": self.calls,
            "sources": sources,
            "copy_source": copy_source,
            "pairs": None if self.pairs is None else [[int(a), int(b)] for a, b in self.pairs],
        }

    @classmethod
    def from_state_dict(cls, st: dict) -> PostGrowthMonitor:
        """The monitor `state_dict` described (KeyError/IndexError/TypeError on a malformed state)."""
        maps = {
            name: ParamMap(name, copy_source={int(d): st["sources"][j].long() for d, j in dims.items()})
            for name, dims in st["copy_source"].items()
        }
        pairs = st.get("pairs")  # absent in states saved before depth growth: same depth, each stream with itself
        monitor = cls(
            maps,
            st["probe"],
            st["base_rms"],
            int(st["every"]),
            None if pairs is None else [(int(a), int(b)) for a, b in pairs],
        )
        monitor.calls = int(st["calls"])
        return monitor


def monitor_after_growth(
    old_model, new_model, old_max_seq_len: int, new_model_cfg, param_maps: dict, val_batch
) -> tuple[PostGrowthMonitor, dict]:
    """(the post-growth monitor, the growth-time RMS-ratio report) from one validation batch (x, y): the
    same for a growth inside training (GrowthHook) and for `nexus grow`, so a run continued from a grown
    checkpoint logs what the run grown in training logs."""
    x, y = val_batch
    probe = torch.cat([x, y[:, -1:]], dim=1) if bool((y[:, :-1] == x[:, 1:]).all()) else None  # real text (LM data)
    n_old, n_new = len(old_model.layers), len(new_model.layers)
    pairs = stream_pairs(param_maps, n_old + 1, n_new + 1) if n_old != n_new else None  # None: each with itself
    report = rms_ratio_report(old_model, new_model, new_model_cfg.vocab_size, probe, pairs)
    # a few rows of the same probe, kept for the post-growth RMS ratio (cheap enough to run every logged step)
    ids = (probe if probe is not None else probe_batch(new_model_cfg.vocab_size))[:4]
    ids = ids[:, : min(ids.shape[1], new_model_cfg.max_seq_len + 1, old_max_seq_len + 1)]
    return PostGrowthMonitor(param_maps, ids, residual_rms(old_model, ids), pairs=pairs), report
