"""Where an analysis gets its inputs: the run config, the model (from a checkpoint, or a preset's
fresh initialization) and validation batches, from the `nexus analyze` arguments."""

from __future__ import annotations

from pathlib import Path


class AnalysisSource:
    """Where the model comes from: a checkpoint (weights + tokenizer) or a preset (random init)."""

    def __init__(self, args, extra: list[str]):
        from ..config import ConfigError
        from ..config_migration import load_config_file
        from ..config_overrides import merge_config_file, parse_overrides

        self.args = args
        if not args.checkpoint and not args.preset and getattr(args, "checkpoints", None):
            args.checkpoint = args.checkpoints[-1][-1]  # `growth` reads all of them; the last names the output
        if args.checkpoint:
            from ..checkpoint import read_config

            self.cfg = read_config(args.checkpoint)
            path = Path(args.checkpoint)
            self.name = path.parent.name if path.name == "checkpoint" else path.name
        elif args.preset:
            from ..presets import get_preset, preset_label

            self.cfg = get_preset(args.preset)
            self.name = preset_label(args.preset)
        elif getattr(args, "config", None):
            self.cfg = load_config_file(args.config)
            self.name, args.config = Path(args.config).stem, None  # the file is the config, not an overlay
        else:
            raise ConfigError("nexus analyze needs --checkpoint DIR or --preset NAME (valid: one of them)")
        # --config over a checkpoint's or preset's config: its fields only; the command line over both
        merge_config_file(self.cfg, getattr(args, "config", None))
        parse_overrides(self.cfg, extra)
        if args.seq_len:
            self.cfg.data.seq_len = args.seq_len
        self.cfg.validate()
        self._model = self._tok = None

    def model(self):
        if self._model is None:
            if self.args.checkpoint:
                from ..checkpoint import load_checkpoint

                self._model, ckpt_cfg, self._tok = load_checkpoint(self.args.checkpoint)
                self.cfg.model = ckpt_cfg.model
            else:
                import torch

                from ..models import build_model

                torch.manual_seed(self.cfg.train.seed)
                self._model = build_model(self.cfg.model)
            self._model.eval()
        return self._model

    def batches(self) -> list:
        from ..config import ConfigError
        from ..data.loader import DataModule

        model = self.model()
        data = DataModule(self.cfg.data, seed=self.cfg.train.seed, tokenizer=self._tok)
        if data.vocab_size > model.cfg.vocab_size:
            raise ConfigError(
                f"data.tokenizer gives {data.vocab_size} tokens but model.vocab_size="
                f"{model.cfg.vocab_size} (valid: the tokenizer the model was built for)"
            )
        return list(data.val_batches(self.args.batches, self.args.batch_size))
