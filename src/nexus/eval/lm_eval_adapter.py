"""lm-evaluation-harness adapter: any nexus model (any architecture, no HF conversion) as an `LM`.

    from nexus.eval.lm_eval_adapter import NexusLM, evaluate_tasks
    lm = NexusLM(model, tokenizer)
    evaluate_tasks(lm, ["my_task"], include_path="tasks/")   # local task YAMLs work offline

A log-likelihood is the sum of log-softmax scores of the continuation tokens given the context,
computed from one forward pass over context+continuation (left-truncated to max_seq_len), exactly
what a direct computation from the model's logits gives. lm-eval is an optional dependency
(`pip install nexus[eval]`); this module imports it lazily so the rest of nexus never needs it.
"""

from __future__ import annotations

import functools

import torch

from ..config import ConfigError


def _require_lm_eval():
    try:
        import lm_eval  # noqa: F401
        from lm_eval.api.model import LM
    except ImportError:
        raise ConfigError(
            "--lm-eval needs lm-evaluation-harness (valid: `pip install 'nexus[eval]'`, i.e. lm-eval>=0.4)"
        ) from None
    return LM


def _base():
    try:
        return _require_lm_eval()
    except ConfigError:
        return object  # the class below still imports without lm-eval; using it raises the clear error


class NexusLM(_base()):  # type: ignore[misc]  # mypy takes no computed base: lm-eval's LM, or object without it
    """lm-eval `LM` over a nexus model and its tokenizer (byte or BPE)."""

    def __init__(self, model, tokenizer, batch_size: int = 8, max_length: int | None = None, device: str = "cpu"):
        _require_lm_eval()
        super().__init__()
        self.model = model.to(device).eval()
        self.tok = tokenizer
        self.batch_size = int(batch_size)
        self.max_length = int(max_length or model.cfg.max_seq_len)
        self._device = torch.device(device)
        # Prefix for an empty context: the tokenizer's BOS if it has one, else EOS (documents are EOS-separated).
        bos = getattr(tokenizer, "bos_id", None)
        self.prefix_id: int = int(tokenizer.eos_id if bos is None else bos)
        self.pad_id = getattr(tokenizer, "pad_id", None) or 0

    @classmethod
    def from_checkpoint(cls, path, **kw) -> NexusLM:
        from ..checkpoint import load_checkpoint

        model, _, tok = load_checkpoint(path)
        return cls(model, tok, **kw)

    # lm-eval's CLI builds models from `--model_args checkpoint=DIR,...` plus its own batch_size/device
    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> NexusLM:
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> NexusLM:
        args = dict(arg_dict)
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
        if "checkpoint" not in args:
            raise ConfigError(
                f"--model_args={arg_dict!r} (valid: checkpoint=DIR[,batch_size=N,max_length=N,device=cpu])"
            )
        unknown = sorted(set(args) - {"checkpoint", "batch_size", "max_length", "device"})
        if unknown:
            raise ConfigError(
                f"--model_args {unknown[0]}={args[unknown[0]]!r} is not a nexus option "
                f"(valid: checkpoint, batch_size, max_length, device)"
            )
        device = str(args.get("device") or extra.get("device") or "cpu")
        if device.startswith("cuda") and not torch.cuda.is_available():
            # lm-eval's CLI defaults --device to cuda; on a CPU machine that default means "run here"
            import sys

            print(f"nexus: --device {device} but CUDA is not available; scoring on cpu", file=sys.stderr)
            device = "cpu"
        kw = {"batch_size": extra.get("batch_size", args.get("batch_size", 8)), "device": device}
        if str(kw["batch_size"]).startswith("auto"):  # lm-eval's automatic batch search: nexus takes a fixed size
            kw["batch_size"] = 8
        if args.get("max_length"):
            kw["max_length"] = int(args["max_length"])
        return cls.from_checkpoint(args["checkpoint"], **kw)

    # ------------------------------------------------------------------ scoring
    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text))

    def _split_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        # A trailing space of the context belongs to the continuation's first token (lm-eval's convention).
        n_space = len(context) - len(context.rstrip())
        if n_space:
            continuation = context[-n_space:] + continuation
            context = context[:-n_space]
        ctx = self.encode(context) if context else [self.prefix_id]
        return ctx, self.encode(continuation)

    @torch.no_grad()
    def score_tokens(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """[(context ids, continuation ids)] -> [(sum log p(continuation | context), continuation is greedy)].

        Right-padded batches: a causal model's outputs at real positions do not see the padding.
        """
        out: list[tuple[float, bool]] = [(0.0, True)] * len(pairs)
        order = sorted(range(len(pairs)), key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])))
        for b in range(0, len(order), self.batch_size):
            idx = order[b : b + self.batch_size]
            seqs, spans = [], []
            for i in idx:
                ctx, cont = pairs[i]
                if not cont:
                    raise ConfigError("lm-eval request with an empty continuation (valid: a non-empty target string)")
                full = (ctx + cont)[-(self.max_length + 1) :]
                inp = full[:-1]
                n_cont = min(len(cont), len(inp))
                seqs.append(inp)
                spans.append((len(inp) - n_cont, len(inp), full[len(full) - n_cont :]))
            width = max(len(s) for s in seqs)
            x = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
            for r, s in enumerate(seqs):
                x[r, : len(s)] = torch.tensor(s, dtype=torch.long)
            logits = self.model(x.to(self._device)).logits.float()
            logp = torch.log_softmax(logits, dim=-1)
            for r, i in enumerate(idx):
                lo, hi, target = spans[r]
                t = torch.tensor(target, dtype=torch.long, device=logp.device)
                lp = logp[r, lo:hi]
                out[i] = (float(lp.gather(-1, t[:, None]).sum()), bool((lp.argmax(-1) == t).all()))
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        pairs = [self._split_pair(*req.args[:2]) for req in requests]
        return self.score_tokens(pairs)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Whole-text log-likelihood in disjoint windows of max_length tokens (lm-eval's rolling scheme)."""
        from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

        results = []
        for req in requests:
            (text,) = req.args[:1]
            windows = [
                make_disjoint_window(w)
                for w in get_rolling_token_windows(
                    token_list=self.encode(text),
                    prefix_token=self.prefix_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                )
            ]
            results.append(sum(ll for ll, _ in self.score_tokens(windows)))
        return results

    @torch.no_grad()
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy (or sampled, with temperature > 0) continuation cut at the first `until` string."""
        outs = []
        for req in requests:
            context, kwargs = req.args[0], dict(req.args[1] if len(req.args) > 1 else {})
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(kwargs.get("max_gen_toks", kwargs.get("max_new_tokens", 64)))
            temperature = float(kwargs.get("temperature", 0.0)) if kwargs.get("do_sample", False) else 0.0
            ids = (self.encode(context) or [self.prefix_id])[-(self.max_length - 1) :]
            x = torch.tensor([ids], dtype=torch.long, device=self._device)
            gen = self.model.generate(
                x, max_new_tokens=max_new, temperature=temperature, eos_id=getattr(self.tok, "eos_id", None)
            )
            text = self.tok.decode(gen[0, len(ids) :].tolist())
            for stop in until:
                if stop and stop in text:
                    text = text[: text.index(stop)]
            outs.append(text)
        return outs


# ----------------------------------------------------------------------------- registration
MODEL_NAME = "nexus"  # `lm_eval --model nexus --model_args checkpoint=DIR`


def register() -> bool:
    """Put NexusLM into lm-eval's model registry as "nexus". Idempotent; False without lm-eval.

    lm-eval fills its registry with its own models only when the registry is empty at the first
    lookup, so they are registered first; otherwise adding "nexus" would hide "hf" and the rest."""
    try:
        import lm_eval.models  # noqa: F401  (registers lm-eval's own models)
        from lm_eval.api.registry import model_registry, register_model
    except ImportError:
        return False
    if MODEL_NAME not in model_registry:
        register_model(MODEL_NAME)(NexusLM)
    return True


register()


# ----------------------------------------------------------------------------- running tasks
def task_manager(tasks: list[str], include_path: str | None = None):
    """A TaskManager that knows every requested task, or a ConfigError naming the missing ones.

    Local task YAMLs (include_path) are indexed first; lm-eval's ~15k bundled task definitions are
    only indexed when a requested task is not local (indexing them takes tens of seconds).
    """
    _require_lm_eval()
    from lm_eval.tasks import TaskManager

    if include_path is not None:
        from pathlib import Path

        if not Path(include_path).is_dir():
            raise ConfigError(f"--lm-eval-include={include_path!r} (valid: a directory of lm-eval task YAML files)")
        tm = TaskManager(include_path=str(include_path), include_defaults=False)
        if not _missing(tm, tasks):
            return tm
    tm = _full_task_manager(str(include_path) if include_path else None)
    missing = _missing(tm, tasks)
    if missing:
        where = f"in {include_path!r} or " if include_path else ""
        raise ConfigError(
            f"--lm-eval task {missing[0]!r} not found {where}among lm-eval's tasks (valid: a task name "
            f"from `lm_eval ls tasks`, or a task YAML in --lm-eval-include DIR)"
        )
    return tm


@functools.lru_cache(maxsize=4)
def _full_task_manager(include_path: str | None):
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=include_path)  # indexes lm-eval's bundled tasks once per process


def _missing(tm, tasks: list[str]) -> list[str]:
    known = set(tm.all_tasks)
    return [t for t in tasks if t not in known]


_DATA_ERRORS = (ConnectionError, OSError, FileNotFoundError, ValueError)


def _offline_error(tasks: list[str], e: Exception) -> ConfigError:
    return ConfigError(
        f"--lm-eval {','.join(tasks)}: the task data cannot be loaded offline "
        f"({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}) (valid: a cached "
        f"dataset or a local task YAML with local data_files)"
    )


def check_tasks_load(tasks: list[str], tm) -> None:
    """Build the tasks (datasets included) once, so missing data fails now rather than after hours of training."""
    try:
        tm.load(tasks)
    except _DATA_ERRORS as e:
        raise _offline_error(tasks, e) from None


def evaluate_tasks(
    lm: NexusLM,
    tasks: list[str],
    include_path: str | None = None,
    limit: int | None = None,
    num_fewshot: int | None = None,
    tm=None,
) -> dict:
    """Run lm-eval tasks; returns {task: {metric: value}}. Dataset problems become one ConfigError."""
    import lm_eval

    tm = tm or task_manager(tasks, include_path)
    try:
        res = lm_eval.simple_evaluate(
            model=lm,
            tasks=tasks,
            task_manager=tm,
            limit=limit,
            num_fewshot=num_fewshot,
            bootstrap_iters=0,
            log_samples=False,
            verbosity="ERROR",
        )
    except _DATA_ERRORS as e:
        raise _offline_error(tasks, e) from None
    out = {}
    for task, metrics in (res or {}).get("results", {}).items():
        out[task] = {
            k.split(",")[0]: v
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not k.startswith("alias") and "stderr" not in k
        }
    return out
