"""`nexus-lm-eval`: lm-evaluation-harness's own command line with the "nexus" model registered.

    nexus-lm-eval run --model nexus --model_args checkpoint=runs/baseline-tiny/checkpoint --tasks hellaswag

Every argument is lm-eval's (this only imports the adapter, which registers the model, and hands
over to lm-eval's CLI). The plain `lm_eval` executable finds the model too, through
nexus-lm-eval.pth (src/_nexus_lm_eval_hook.py); this script is the form that needs no .pth file
(for an interpreter that does not process site-packages .pth files, e.g. an embedded one).
"""

from __future__ import annotations


def main() -> None:
    from ..config import ConfigError
    from .lm_eval_adapter import register

    if not register():
        raise SystemExit(
            f"nexus-lm-eval: error: {ConfigError.__name__}: lm-evaluation-harness is not installed "
            "(valid: pip install 'nexus[eval]')"
        )
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()


if __name__ == "__main__":
    main()
