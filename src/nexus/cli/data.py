"""`nexus data prepare SOURCE --tokenizer T --out DIR`: tokenize a corpus into a prepared directory."""

from __future__ import annotations

from .common import positive_int


def add_parser(sub) -> None:
    from ..data.readers import file_readers, valid_sources

    p = sub.add_parser("data", help="prepare a corpus: tokenize it once into memory-mapped shards")
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True, parser_class=type(p))
    q = dsub.add_parser(
        "prepare",
        help="tokenize SOURCE into sharded token files plus manifest.json in --out",
        description=f"Tokenize SOURCE ({valid_sources(prepare_only=True)}) into DIR: train-*.bin / "
        "val-*.bin shards, the tokenizer and manifest.json. Train on it with `nexus train "
        "--data DIR`. Interrupted runs resume: run the same command again.",
    )
    q.add_argument("source", metavar="SOURCE")
    q.add_argument(
        "--tokenizer",
        required=True,
        metavar="T",
        help="byte | bpe (trained on the training documents) | a tokenizer.json or a directory holding one "
        "(a checkpoint, another prepared corpus)",
    )
    q.add_argument("--out", required=True, metavar="DIR", help="the prepared directory (new, empty, or one to resume)")
    q.add_argument(
        "--num-proc",
        type=positive_int("--num-proc"),
        default=None,
        help="worker processes (default: the usable cores, at most 8)",
    )
    q.add_argument(
        "--shard-mb",
        type=positive_int("--shard-mb"),
        default=8,
        help="characters of text per shard, in millions (the unit of parallel work and of resume)",
    )
    q.add_argument("--val-fraction", type=float, default=None, help="share of documents held out (default 0.05)")
    q.add_argument("--split-seed", type=int, default=None, help="seed of the document-level split (default 1234)")
    q.add_argument("--text-field", default=None, help="field holding text in json/parquet/hub rows (default text)")
    q.add_argument("--max-documents", type=int, default=None, help="read at most N documents (default: all)")
    q.add_argument("--bpe-vocab-size", type=int, default=None, help="vocabulary of --tokenizer bpe (default 2048)")
    q.add_argument("--chat", action="store_true", help="rows are chat conversations; loss mask on assistant tokens")
    splitting = [r for r in file_readers() if "document_per_file" in r.options and not r.whole_files]
    whole = [r for r in file_readers() if r.whole_files]
    q.add_argument(
        "--document-per-file",
        action="store_true",
        help=f"each {'/'.join(r.shown_suffixes() for r in splitting)} file is one document (default: "
        f"blank lines separate documents; {'/'.join(r.label for r in whole)} files are always one "
        "document each)",
    )
    q.add_argument(
        "--skip-bad",
        action="store_true",
        help="leave out empty, binary and non-UTF-8 files (counted and named) instead of refusing",
    )
    q.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def run(args, extra) -> int:
    import json
    import sys
    from pathlib import Path

    from ..atomic import guard_output
    from ..config import ConfigError, DataConfig
    from ..data.loader import default_num_proc
    from ..data.prepare import fingerprint, prepare, settle_finished
    from ..data.readers import valid_sources
    from ..data.sources import resolve_source
    from ..outdir import PREPARED, check_output

    cfg = DataConfig(
        source=args.source, tokenizer=args.tokenizer, chat=args.chat, document_per_file=args.document_per_file
    )
    for name in ("val_fraction", "split_seed", "text_field", "max_documents", "bpe_vocab_size"):
        if getattr(args, name) is not None:
            setattr(cfg, name, getattr(args, name))
    errors: list[str] = []
    cfg.validate(errors)
    if errors:
        raise ConfigError(errors[0])
    source = resolve_source(args.source)
    source.check_fraction_unused(cfg.val_fraction, "--val-fraction")
    if not source.reader.documents_to_prepare:
        raise ConfigError(
            f"SOURCE={args.source!r} is a {source.kind} source, already tokenized or generated "
            f"(valid: documents: {valid_sources(prepare_only=True)})"
        )
    out = check_output(Path(args.out), PREPARED, resume=True, sources=source.all_files)
    bad = source.bad_files()  # every bad file named at once, before anything is written
    if bad and not args.skip_bad:
        source.check_files()
    if bad:
        source = source.without(bad)
        print(f"nexus data prepare: --skip-bad left out {source.describe_bad(bad)}", file=sys.stderr)
    next(iter(source.documents(cfg)))  # opens the source (a hub stream too) before anything is written
    tok = _tokenizer(args.tokenizer, source, cfg)
    if source.kind == "stdlib" and not args.quiet:
        from ..data.stdlib_corpus import describe

        print(f"nexus data: {describe()}", file=sys.stderr)
    # one writer per --out: a second prepare into the same directory is refused in one line, never interleaved
    with guard_output(out, PREPARED, resume=True, sources=source.all_files):
        done = _already_prepared(out, fingerprint(source, cfg, tok, args.shard_mb << 20))
        if done is not None:
            settle_finished(out, done, mark_output=True)
            tot, files = done["tokens"], sum(len(v) for v in done["shards"].values())
            print(
                f"nexus data prepare: already prepared in {out} ({tot['train']:,} train + {tot['val']:,} validation "
                f"tokens, {files} shard files); nothing to do",
                file=sys.stderr,
            )
            if args.quiet:
                print(json.dumps({"out": str(out), "tokens": tot, "documents": done["documents"]}))
            return 0
        m = prepare(
            source,
            cfg,
            tok,
            out,
            num_proc=args.num_proc or default_num_proc(),
            shard_bytes=args.shard_mb << 20,
            progress=not args.quiet,
            label="data prepare",
            mark_output=True,
        )
    if args.quiet:
        print(json.dumps({"out": str(out), "tokens": m["tokens"], "documents": m["documents"]}))
    return 0


def _already_prepared(out, fp: dict) -> dict | None:
    """The manifest of a finished directory prepared with exactly these settings whose every shard still holds
    the bytes prepare wrote, else None (prepare then refuses a changed shard, or prepares a missing one again)."""
    from ..data.shards import MANIFEST, SPLITS, read_manifest, shard_problems

    if not (out / MANIFEST).is_file():
        return None
    m = read_manifest(out, str(out))
    if m.get("fingerprint") != fp or shard_problems(out, [e for s in SPLITS for e in m["shards"][s]], m["dtype"]):
        return None
    return m


def _tokenizer(spec: str, source, cfg):
    from ..data.tokenizer import BPETokenizer, ByteTokenizer

    if spec == "byte":
        if cfg.chat:
            from ..data.chat import ChatByteTokenizer

            return ChatByteTokenizer()
        return ByteTokenizer()
    if spec == "bpe":
        from ..data.prepare import doc_text

        docs = source.split_documents(cfg)
        return BPETokenizer.train((doc_text(d) for d, v in docs if not v), cfg.bpe_vocab_size)
    from ..data.tokenizer_files import load_tokenizer

    return load_tokenizer(spec)


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("data", __name__)
