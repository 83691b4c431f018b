"""Tokenize a document source into a prepared directory (see shards.py for the format).

One streaming pass: documents are split train/validation as they arrive (split.py), grouped into shards
of about `shard_bytes` characters, and each shard is tokenized by a worker process (a process pool is
started only once a second shard exists, so small corpora never pay for it) while the main process
reads on. At most num_proc + 1 shards are in flight, so memory is bounded by shard size, not corpus
size. Every shard file is written under a temporary name and renamed; `.prepare-state.json` records
finished shards, so an interrupted run resumes without re-tokenizing them (the stream is re-read to
the same shard boundaries); `manifest.json` is written last, atomically.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import pickle
import re
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np

from ..atomic import _alive, write_text_atomic
from ..config import ConfigError, DataConfig
from ..lifeline import die_with as _die_with
from ..outdir import PREPARED, write_marker
from .shards import FORMAT, MANIFEST, SPLITS, VERSION, read_manifest, shard_problems, token_dtype, tokenizer_identity
from .split import SPLIT_BLOCK

SHARD_BYTES = 8 << 20  # characters of text per shard: the unit of parallel work, resume and memory
ENCODE_BATCH = 512  # documents per encode_batch call inside a shard
STATE = ".prepare-state.json"
_SHARD_TMP = re.compile(r"^\.(?:train|val)-\d+\.(?:bin|mask)\.tmp-(\d+)$")  # what _write_split writes first


def fingerprint(source, cfg: DataConfig, tok, shard_bytes: int) -> dict:
    """Everything the prepared tokens depend on; a directory is reused or resumed only when it matches."""
    fp = {
        "source": source.identity(),
        "tokenizer": tokenizer_identity(tok),
        "val_fraction": cfg.val_fraction,
        "split_seed": cfg.split_seed,
        "split_block": SPLIT_BLOCK,
        "text_field": cfg.text_field,
        "chat": cfg.chat,
        "max_documents": cfg.max_documents,
        "shard_bytes": shard_bytes,
        "version": VERSION,
    }
    if cfg.document_per_file:  # only when set: directories and caches prepared before the option keep their key
        fp["document_per_file"] = True
    return fp


# fingerprint key -> how `nexus data prepare` names it, and how a value is shown
_SETTING = {
    "shard_bytes": ("--shard-mb", lambda v: f"{v / (1 << 20):g}"),
    "val_fraction": ("--val-fraction", str),
    "split_seed": ("--split-seed", str),
    "text_field": ("--text-field", str),
    "chat": ("--chat", str),
    "max_documents": ("--max-documents", str),
    "document_per_file": ("--document-per-file", str),
    "tokenizer": ("--tokenizer", lambda t: f"{t['kind']} (vocab {t['vocab_size']}, sha256 {t['sha256']})"),
    "split_block": ("the split block size", str),
    "version": ("the format version", str),
}


_OFF = {"document_per_file": False}  # keys written only when set


def _shown(show, value) -> str:
    if value is None:
        return "unset"
    return ("on" if value else "off") if isinstance(value, bool) else show(value)


def differences(old: dict, new: dict) -> str:
    """The settings two fingerprints differ in, as `--shard-mb 8 -> 2`, old value first."""
    out = []
    order = {k: i for i, k in enumerate(_SETTING)}  # the known settings first, then the rest by name (a set's
    for key in sorted(set(old) | set(new), key=lambda k: (order.get(k, len(order)), k)):  # order follows the hash seed)
        if old.get(key) != new.get(key):
            name, show = _SETTING.get(key, (key, str))
            a, b = (_shown(show, v) for v in (old.get(key, _OFF.get(key)), new.get(key, _OFF.get(key))))
            out.append(
                "SOURCE is not the one it was prepared from (file paths, sizes or modification times differ)"
                if key == "source"
                else f"{name} {a} -> {b}"
            )
    return "; ".join(out)


def prepare(
    source,
    cfg: DataConfig,
    tok,
    out: Path,
    *,
    num_proc: int = 1,
    shard_bytes: int = SHARD_BYTES,
    progress: bool = True,
    label: str = "prepare",
    quiet_below_s: float = 0.0,
    mark_output: bool = False,
) -> dict:
    """Tokenize `source` into `out` (created if missing) and return the manifest. A finished directory
    with the same fingerprint is returned as it is; an interrupted one is resumed. quiet_below_s: the
    closing summary line is printed only when preparing took at least this long (the automatic cache
    of a small corpus stays silent; a long one has shown progress lines and ends with the summary).
    mark_output: mark `out` as a nexus output (`nexus data prepare --out`); the cache, which torchrun
    ranks may fill at once, is not marked."""
    out = Path(out)
    fp = fingerprint(source, cfg, tok, shard_bytes)
    state_path = out / STATE
    done: dict[int, dict] = {}
    if (out / MANIFEST).is_file():
        m = read_manifest(out, str(out))
        if m.get("fingerprint") != fp:
            raise ConfigError(
                f"--out={str(out)!r} holds a corpus prepared with other settings: "
                f"{differences(m.get('fingerprint') or {}, fp)} (valid: a new directory, or the settings it "
                "was prepared with)"
            )
        bad = shard_problems(out, [e for s in SPLITS for e in m["shards"][s]], m["dtype"])
        if not bad:
            settle_finished(out, m, mark_output)
            return m
        _refuse_changed(out, bad)
        # only missing shards: redo exactly those (shards are deterministic given the fingerprint)
        done = _done_from_manifest(m, {name for name, _ in bad})
        write_text_atomic(state_path, json.dumps({"fingerprint": fp, "done": done}))
        (out / MANIFEST).unlink()
        if progress:
            print(
                f"nexus {label}: {len(bad)} shard file(s) missing from {out} ({', '.join(n for n, _ in bad[:3])}"
                f"{' ...' if len(bad) > 3 else ''}); preparing them again",
                file=sys.stderr,
                flush=True,
            )
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    if mark_output:
        write_marker(out, PREPARED)  # at once: an interrupted directory is still recognised as ours to resume
    if state_path.is_file() and not done:
        try:
            st = json.loads(state_path.read_text())
            if st.get("fingerprint") == fp:
                done = {int(k): v for k, v in st["done"].items()}
        except (OSError, ValueError, KeyError, AttributeError):
            done = {}  # a damaged state file: shards are redone, never trusted
    if done:  # finished shards of an interrupted run are kept only when their bytes are still the ones written
        kept = [e for res in done.values() for s in SPLITS if (e := res.get(s))]
        bad = shard_problems(out, kept, token_dtype(tok.vocab_size))
        _refuse_changed(out, bad)
        gone = {name for name, _ in bad}
        done = {i: res for i, res in done.items() if not any(res.get(s) and res[s]["file"] in gone for s in SPLITS)}
    for p in out.iterdir():  # shard files an interrupted run left half-written; not a live process's
        m = _SHARD_TMP.match(p.name)  # (torchrun ranks may fill one cache directory at once)
        if m and not _alive(int(m.group(1))):
            p.unlink(missing_ok=True)
    dtype = np.dtype(token_dtype(tok.vocab_size)).name
    t0 = time.perf_counter()
    meter = Progress(source.total_bytes(), label, progress)
    if done:
        meter.say(f"{label}: resuming, {len(done)} finished shard(s) in {out} kept")
    runner = _Runner(num_proc, tok, out, dtype, cfg.chat)
    try:
        for idx, task in enumerate(_shard_tasks(source.split_documents(cfg), cfg, shard_bytes)):
            chars = sum(len(t) if isinstance(t, str) else 0 for t, _ in task)
            if idx in done:
                meter.update(chars, 0)
                continue
            for i, res in runner.submit(idx, task, chars):
                _finish(done, i, res, fp, state_path, meter)
        for i, res in runner.finish():
            _finish(done, i, res, fp, state_path, meter)
    except BaseException:
        runner.close()
        if created and not done:  # nothing worth resuming: leave no trace
            import shutil

            shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        runner.close()
        meter.close()
    manifest = _manifest(done, fp, source, dtype, tok, cfg)
    before = {p.name for p in out.iterdir()}
    tok.save(out)
    tokenizer_files = sorted({p.name for p in out.iterdir()} - before)
    write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    state_path.unlink(missing_ok=True)
    if mark_output:  # nexus owns exactly what it wrote here: every shard, the tokenizer, the manifest
        from ..outdir.manifest import record

        written = [e[k] for s in SPLITS for e in manifest["shards"][s] for k in ("file", "mask") if e.get(k)]
        record(out, PREPARED, files=[*written, *tokenizer_files, MANIFEST])
    dt = time.perf_counter() - t0
    tot = manifest["tokens"]
    if dt >= quiet_below_s:
        meter.say(
            f"{label}: {tot['train']:,} train + {tot['val']:,} validation tokens from "
            f"{sum(manifest['documents'].values()):,} documents in {len(done)} shard(s), {dt:.1f} s "
            f"({(tot['train'] + tot['val']) / max(dt, 1e-9):,.0f} tokens/s) -> {out}"
        )
    return manifest


def _refuse_changed(out: Path, bad: list[tuple[str, str]]) -> None:
    """A shard whose bytes differ from what prepare wrote (edited, truncated, damaged) is refused, never
    rewritten: once changed it may be the user's (nexus.outdir owns only what it wrote, unchanged)."""
    changed = [(n, why) for n, why in bad if why != "missing"]
    if changed:
        name, why = changed[0]
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        raise ConfigError(
            f"--out={str(out)!r}: shard {name}{more} {why} (valid: delete the damaged shard "
            f"file(s) and run the same command again to prepare them anew, or a new --out)"
        )


def _done_from_manifest(m: dict, drop: set[str]) -> dict[int, dict]:
    """The finished-shard state a manifest describes, less every shard index with a file in `drop`."""
    done: dict[int, dict] = {}
    for split in SPLITS:
        for e in m["shards"][split]:
            idx = int(re.fullmatch(r"(?:train|val)-(\d+)\.bin", e["file"]).group(1))
            done.setdefault(idx, {"chars": 0, "train": None, "val": None})[split] = e
    lost = {i for i, res in done.items() if any(res[s] and {res[s]["file"], res[s].get("mask")} & drop for s in SPLITS)}
    return {i: res for i, res in done.items() if i not in lost}


def settle_finished(out: Path, manifest: dict, mark_output: bool) -> None:
    """A finished directory whose last steps a kill cut off (after manifest.json's rename): its state file,
    proven this corpus's by its fingerprint, is removed, and the shards and manifest.json (whose bytes
    manifest.json's hashes and the shard check just proved) are entered in the output's manifest."""
    state_path = out / STATE
    try:
        if json.loads(state_path.read_text()).get("fingerprint") == manifest.get("fingerprint"):
            state_path.unlink()
    except (OSError, ValueError, AttributeError, RecursionError):
        pass  # none, or not this corpus's: left where it is
    if mark_output:
        from ..outdir.manifest import read_manifest as read_ownership
        from ..outdir.manifest import record

        listed = (read_ownership(out) or {"files": {}})["files"]
        written = [e[k] for s in SPLITS for e in manifest["shards"][s] for k in ("file", "mask") if e.get(k)]
        missing = [n for n in (*written, MANIFEST) if n not in listed]
        if missing:
            record(out, PREPARED, files=missing)


def _finish(done: dict, idx: int, res: dict, fp: dict, state_path: Path, meter) -> None:
    done[idx] = res
    write_text_atomic(state_path, json.dumps({"fingerprint": fp, "done": done}))
    meter.update(res["chars"], sum(e["tokens"] for e in (res["train"], res["val"]) if e))


def _manifest(done: dict, fp: dict, source, dtype: str, tok, cfg: DataConfig) -> dict:
    shards = {s: [done[i][s] for i in sorted(done) if done[i][s]] for s in SPLITS}
    total = {k: {s: sum(e[k] for e in shards[s]) for s in SPLITS} for k in ("tokens", "documents", "bytes")}
    split = (
        {"unit": "file", "val_files": [str(p) for p in source.val_files]}
        if source.val_files
        else {"unit": "document", "val_fraction": cfg.val_fraction, "split_seed": cfg.split_seed, "block": SPLIT_BLOCK}
    )
    return {
        "format": FORMAT,
        "version": VERSION,
        "source": source.spec,
        "tokenizer": tokenizer_identity(tok),
        "dtype": dtype,
        "split": split,
        "max_documents": cfg.max_documents,
        **total,
        "shards": shards,
        "fingerprint": fp,
    }


def _shard_tasks(split_docs, cfg: DataConfig, shard_bytes: int):
    """Lists of (document, is_validation) of about shard_bytes characters each, in stream order."""
    task, size = [], 0
    for doc, is_val in split_docs:
        if is_val is None:  # a single document: its tail is the validation text
            if cfg.chat:
                raise ConfigError(
                    f"data.source={cfg.source!r} holds one conversation (valid: at least two, so "
                    "one can be held out for validation)"
                )
            text = doc_text(doc)
            cut = int(len(text) * (1 - cfg.val_fraction))
            yield [(text[:cut], False), (text[cut:], True)]
            return
        task.append((doc, is_val))
        size += len(doc) if isinstance(doc, str) else len(doc_text(doc))
        if size >= shard_bytes:
            yield task
            task, size = [], 0
    if task:
        yield task


def doc_text(doc) -> str:
    if isinstance(doc, str):
        return doc
    if isinstance(doc, dict) and "messages" in doc:
        return "\n".join(str(m.get("content", "")) for m in doc["messages"])
    return str(doc)


# ----------------------------------------------------------------------------- one shard (in a worker)
def encode_shard(tok, idx: int, docs: list, out: Path, dtype: str, chat: bool) -> dict:
    """Tokenize one shard's documents into train-NNNNN.bin / val-NNNNN.bin (+ .mask), EOS after each."""
    res = {"chars": sum(len(d) if isinstance(d, str) else 0 for d, _ in docs)}
    for split in SPLITS:
        mine = [d for d, v in docs if v == (split == "val")]
        res[split] = _write_split(tok, mine, Path(out), f"{split}-{idx:05d}", np.dtype(dtype), chat) if mine else None
    return res


def _write_split(tok, docs: list, out: Path, stem: str, dtype, chat: bool) -> dict:
    tmp_tok = out / f".{stem}.bin.tmp-{os.getpid()}"
    tmp_mask = out / f".{stem}.mask.tmp-{os.getpid()}" if chat else None
    n = hi = nbytes = 0
    h_tok, h_mask = hashlib.sha256(), hashlib.sha256()  # of the bytes as written: checked on every later open

    def put(f, h, arr: np.ndarray) -> None:
        b = arr.tobytes()
        h.update(b)
        f.write(b)

    try:
        with open(tmp_tok, "wb") as ft, open(tmp_mask, "wb") if chat else _Null() as fm:
            for i in range(0, len(docs), ENCODE_BATCH):
                batch = docs[i : i + ENCODE_BATCH]
                nbytes += sum(len(doc_text(d).encode("utf-8")) for d in batch)
                if chat:
                    from .chat import encode_conversation

                    for d in batch:
                        t, m = encode_conversation(tok, d)
                        arr = np.asarray(t, dtype=np.int64)
                        put(fm, h_mask, np.asarray(m, dtype=np.uint8))
                        hi = max(hi, int(arr.max(initial=0)))
                        put(ft, h_tok, arr.astype(dtype))
                        n += len(arr)
                    continue
                arr = encode_with_eos(tok, [doc_text(d) for d in batch])
                hi = max(hi, int(arr.max(initial=0)))
                put(ft, h_tok, arr.astype(dtype))
                n += len(arr)
        os.replace(tmp_tok, out / f"{stem}.bin")
        if chat:
            os.replace(tmp_mask, out / f"{stem}.mask")
    finally:
        tmp_tok.unlink(missing_ok=True)
        if tmp_mask is not None:
            tmp_mask.unlink(missing_ok=True)
    return {
        "file": f"{stem}.bin",
        "mask": f"{stem}.mask" if chat else None,
        "tokens": n,
        "documents": len(docs),
        "bytes": nbytes,
        "max_id": hi,
        "sha256": h_tok.hexdigest(),
        **({"mask_sha256": h_mask.hexdigest()} if chat else {}),
    }


def encode_with_eos(tok, texts: list[str]) -> np.ndarray:
    """The texts' ids, EOS after each, as one int64 array: the tokenizer's own flat encoder when it has
    one (bytes need no Python list per token), else its encode_batch."""
    flat_encoder = getattr(tok, "encode_batch_flat", None)
    if flat_encoder is not None:
        ids, lens = flat_encoder(texts)
    else:
        lists = tok.encode_batch(texts)
        lens = np.fromiter((len(x) for x in lists), np.int64, len(lists))
        ids = np.fromiter(itertools.chain.from_iterable(lists), np.int64, int(lens.sum()))
    ends = np.cumsum(lens + 1) - 1  # where each text's EOS goes
    out = np.empty(len(ids) + len(lens), dtype=np.int64)
    keep = np.ones(len(out), dtype=bool)
    keep[ends] = False
    out[keep] = ids
    out[ends] = tok.eos_id
    return out


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


_WORKER_TOK = None


def _init_worker(tok_bytes: bytes, parent_pid: int) -> None:
    global _WORKER_TOK
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker process: num_proc means what it says
    _die_with(parent_pid)
    _WORKER_TOK = pickle.loads(tok_bytes)


def _encode_in_worker(idx, docs, out, dtype, chat):
    return encode_shard(_WORKER_TOK, idx, docs, out, dtype, chat)


class _Runner:
    """Shards tokenized in order of submission: in-process for num_proc 1 or a one-shard corpus, else by
    a process pool with at most num_proc + 1 shards in flight."""

    def __init__(self, num_proc: int, tok, out: Path, dtype: str, chat: bool):
        self.num_proc, self.tok, self.args = num_proc, tok, (str(out), dtype, chat)
        self.pool = None
        self.held = None  # the first shard, kept until a second one shows a pool is worth starting
        self.pending: deque = deque()

    def submit(self, idx: int, task: list, chars: int) -> list:
        if self.num_proc <= 1:
            return [(idx, encode_shard(self.tok, idx, task, *self.args))]
        if self.pool is None and self.held is None:
            self.held = (idx, task)
            return []
        if self.pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            ctx = multiprocessing.get_context("forkserver" if sys.platform != "win32" else "spawn")
            self.pool = ProcessPoolExecutor(
                self.num_proc, mp_context=ctx, initializer=_init_worker, initargs=(pickle.dumps(self.tok), os.getpid())
            )
            self._submit(*self.held)
            self.held = None
        self._submit(idx, task)
        out = []
        while len(self.pending) > self.num_proc + 1 or (self.pending and self.pending[0][1].done()):
            i, fut = self.pending.popleft()
            out.append((i, fut.result()))
        return out

    def _submit(self, idx: int, task: list) -> None:
        self.pending.append((idx, self.pool.submit(_encode_in_worker, idx, task, *self.args)))

    def finish(self) -> list:
        out = []
        if self.held is not None:
            out.append((self.held[0], encode_shard(self.tok, self.held[0], self.held[1], *self.args)))
            self.held = None
        while self.pending:
            i, fut = self.pending.popleft()
            out.append((i, fut.result()))
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


class Progress:
    """tqdm on a terminal; elsewhere a plain line every 10 s. Shows characters read, tokens/s and the ETA
    (from the input's file sizes when known; a hub stream has no ETA)."""

    EVERY_S = 10.0

    def __init__(self, total: int | None, label: str, enabled: bool):
        from tqdm import tqdm

        self.total, self.label, self.enabled = total, label, enabled
        self.t0 = self.last = time.perf_counter()
        self.chars = self.tokens = 0
        self.tty = enabled and sys.stderr.isatty()
        self.bar = tqdm(total=total, unit="B", unit_scale=True, desc=label, disable=not self.tty, dynamic_ncols=True)

    def update(self, chars: int, tokens: int) -> None:
        self.chars += chars
        self.tokens += tokens
        now = time.perf_counter()
        rate = self.tokens / max(now - self.t0, 1e-9)
        self.bar.update(chars)
        self.bar.set_postfix_str(f"{self.tokens / 1e6:.1f}M tokens, {rate / 1e6:.2f}M tok/s")
        if self.enabled and not self.tty and now - self.last >= self.EVERY_S:
            self.last = now
            eta = "ETA unknown (stream)"
            if self.total:
                left = max(self.total - self.chars, 0) * (now - self.t0) / max(self.chars, 1)
                eta = f"{100 * min(self.chars / self.total, 1):.0f}% of input, ETA {left:.0f} s"
            self.say(f"{self.label}: {self.tokens:,} tokens | {rate:,.0f} tokens/s | {eta}")

    def say(self, msg: str) -> None:
        if self.enabled:
            print(f"nexus {msg}" if not msg.startswith("nexus") else msg, file=sys.stderr, flush=True)

    def close(self) -> None:
        self.bar.close()
