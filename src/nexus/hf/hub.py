"""The Hugging Face Hub through huggingface_hub: `nexus import --hf OWNER/NAME` fetches a model
(`fetch_hf_model`), `nexus export --push-to-hub REPO` uploads an export and `nexus train --push-to-hub
REPO` a final checkpoint.

`check_hub_reachable` runs before any export work, so an offline machine (or HF_HUB_OFFLINE=1, or a
malformed repo id) fails in a second with one line instead of after converting the weights.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

from ..config import ConfigError

CONNECT_TIMEOUT_S = 5.0


def check_hub_reachable(repo: str) -> None:
    from huggingface_hub import constants
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as e:
        raise ConfigError(
            f"--push-to-hub={repo!r} is not a valid repo id ({str(e).splitlines()[0][:100]}) "
            "(valid: NAME or OWNER/NAME)"
        ) from None
    if constants.HF_HUB_OFFLINE:
        raise ConfigError(
            f"--push-to-hub={repo!r} but HF_HUB_OFFLINE is set (valid: run online, or drop --push-to-hub)"
        )
    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise ConfigError(
            f"--push-to-hub={repo!r} but {constants.ENDPOINT} is not reachable ({type(e).__name__}) "
            "(valid: run online, or drop --push-to-hub)"
        ) from None


def push_folder(folder: Path, repo: str, what: str = "export") -> str:
    """Create the model repo if needed and upload every file of `folder` (a nexus `what`: export,
    checkpoint); returns the repo URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        url = api.create_repo(repo, repo_type="model", exist_ok=True)
        api.upload_folder(
            folder_path=str(folder), repo_id=repo, repo_type="model", commit_message=f"Upload nexus {what}"
        )
    except Exception as e:  # auth, permissions, quota: huggingface_hub raises many HTTP error types
        raise ConfigError(
            f"--push-to-hub={repo!r} failed ({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})"
            f"; the {what} itself is complete in {str(folder)!r}"
        ) from None
    return str(url)


# What an import reads: config, tokenizer files and safetensors weights (a .bin only when a repo has no safetensors).
IMPORT_FILES = ["*.json", "*.safetensors", "tokenizer.model", "*.txt"]
LEGACY_WEIGHTS = ["pytorch_model*.bin"]


def fetch_hf_model(source: str) -> str:
    """`--hf` as given when it is a local path (or cannot be a hub id: the importer reports it), else the
    local directory of hub model `source`, downloaded (or found in the cache) with huggingface_hub. Offline
    (HF_HUB_OFFLINE=1, or the hub unreachable) a model not in the cache is one line, nothing downloaded."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if Path(source).exists():
        return source
    try:
        validate_repo_id(source)
    except HFValidationError:
        return source  # neither a directory nor a hub id: the importer's "not a directory" line
    if not constants.HF_HUB_OFFLINE:
        print(
            f"nexus import: fetching {source} from {constants.ENDPOINT} (config, tokenizer and weights; "
            "cached for next time)",
            file=sys.stderr,
        )
    try:
        local = snapshot_download(source, allow_patterns=IMPORT_FILES)
        if not any(Path(local).glob("*.safetensors")):
            local = snapshot_download(source, allow_patterns=IMPORT_FILES + LEGACY_WEIGHTS)
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else f"{constants.ENDPOINT} is not reachable"
        raise ConfigError(
            f"--hf={source!r} is not a local directory and not in the hub cache, and {why} (valid: a "
            "local HF model directory, or a hub model id while online)"
        ) from None
    except (RepositoryNotFoundError, GatedRepoError) as e:
        raise ConfigError(
            f"--hf={source!r}: no such hub model, or it needs access rights ({type(e).__name__}) "
            "(valid: a public hub model id such as Qwen/Qwen3-0.6B, or a local directory)"
        ) from None
    except Exception as e:  # HTTP, disk and quota errors: huggingface_hub raises many types
        raise ConfigError(
            f"--hf={source!r}: the hub download failed ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:120] if str(e) else ''})"
        ) from None
    return local
