"""`nexus generate`: sample text from a checkpoint with a KV cache."""

from __future__ import annotations

from .common import DefaultsHelpFormatter, int_in_range, nonneg_float, positive_int

# kept equal to models.bitlinear.PACKED_KERNELS (tested); listed here so --help needs no torch
PACKED_KERNELS = ("auto", "fp32-2bit", "fp32-int8", "int4", "int8", "dense")


def add_parser(sub) -> None:
    p = sub.add_parser("generate", formatter_class=DefaultsHelpFormatter, help="generate text from a checkpoint")
    p.add_argument(
        "--checkpoint",
        required=True,
        metavar="DIR|FILE",
        help="a checkpoint directory, or a packed ternary file from `nexus export --format ternary`",
    )
    p.add_argument("--prompt", default="The ", help="text the generation continues")
    p.add_argument(
        "--max-new-tokens",
        type=positive_int("--max-new-tokens"),
        default=128,
        help="tokens to generate (fewer when the model's context ends first)",
    )
    p.add_argument("--temperature", type=nonneg_float("--temperature"), default=0.8, help="0 = greedy")
    p.add_argument("--top-k", type=int_in_range("--top-k", 0, 2**63 - 1, "an integer >= 0"), default=40, help="0 = off")
    p.add_argument(
        "--top-p", type=nonneg_float("--top-p"), default=0.95, help="nucleus sampling mass in (0, 1]; 1 = off"
    )
    p.add_argument(
        "--seed",
        type=int_in_range("--seed", 0, 2**64 - 1, "an integer in [0, 2**64)"),
        default=0,
        help="sampling seed (the same seed and prompt give the same text)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="model field changed at load time, e.g. arch.t_inner=20 (test-time depth)",
    )
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template (SFT models)")
    p.add_argument(
        "--kernel",
        default="auto",
        choices=PACKED_KERNELS,
        help="decode kernel of a packed ternary file (auto: every kernel timed on this CPU, the fastest "
        "taken; the choice and the times are printed)",
    )
    p.set_defaults(func=run)


def parse_sets(items: list[str]) -> dict:
    from ..config import ConfigError

    out = {}
    for it in items:
        if "=" not in it:
            raise ConfigError(f"--set={it!r} (valid: FIELD=VALUE, e.g. arch.t_inner=20)")
        k, v = it.split("=", 1)
        out[k] = v
    return out


def run(args, extra) -> int:
    import sys

    import torch

    from ..checkpoint import load_checkpoint
    from ..config import ConfigError

    if args.top_p <= 0 or args.top_p > 1:
        raise ConfigError(f"--top-p={args.top_p} (valid: a number in (0, 1])")
    from pathlib import Path

    if Path(args.checkpoint).is_file():  # a checkpoint is a directory; a file can only be a ternary export
        from ..export.ternary import load_ternary

        model, cfg, tok = load_ternary(args.checkpoint, kernel=args.kernel, overrides=parse_sets(args.set) or None)
    elif args.kernel != "auto":
        raise ConfigError(
            f"--kernel={args.kernel} applies to a packed ternary file, not to the checkpoint directory "
            f"{args.checkpoint!r} (valid there: leave --kernel out)"
        )
    else:
        model, cfg, tok = load_checkpoint(args.checkpoint, parse_sets(args.set) or None)
    model.eval()
    bad = next((i for i, ch in enumerate(args.prompt) if 0xD800 <= ord(ch) <= 0xDFFF), None)
    if bad is not None:
        raise ConfigError(
            f"--prompt has an unencodable lone surrogate {args.prompt[bad]!r} at character {bad} "
            "(valid: text that encodes as UTF-8)"
        )
    if args.chat:
        from ..data.chat import chat_prompt_ids

        ids = chat_prompt_ids(tok, [{"role": "user", "content": args.prompt}])
    else:
        ids = tok.encode(args.prompt) or [tok.eos_id]
    context = getattr(model.cfg, "max_seq_len", None)
    if context is not None and len(ids) > context:
        raise ConfigError(
            f"--prompt is {len(ids)} tokens but the model's context is {context} (valid: a prompt of "
            f"at most {context} tokens)"
        )
    room = None if context is None else context - len(ids) + 1  # the last new token is never fed back
    if room is not None and args.max_new_tokens > room:
        print(
            f"nexus generate: note: the model's context is {context} tokens; generation stops after {room} new "
            f"tokens (--max-new-tokens={args.max_new_tokens})",
            file=sys.stderr,
        )
    g = torch.Generator().manual_seed(args.seed)
    n_new = (
        args.max_new_tokens if room is None else min(args.max_new_tokens, room)
    )  # the note above said it: no API warning
    out = model.generate(
        torch.tensor([ids]),
        max_new_tokens=n_new,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        eos_id=tok.eos_id if args.chat else None,
        generator=g,
    )
    new = out[0, len(ids) :].tolist()
    print(args.prompt + tok.decode(new) if not args.chat else tok.decode(new))
    return 0


from . import register_command  # noqa: E402  (registration line, after the definitions)

register_command("generate", __name__)
