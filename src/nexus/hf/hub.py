"""`nexus export --push-to-hub REPO`, `nexus train --push-to-hub REPO`: upload a directory with huggingface_hub.

`check_hub_reachable` runs before any export work, so an offline machine (or HF_HUB_OFFLINE=1, or a
malformed repo id) fails in a second with one line instead of after converting the weights.
"""
from __future__ import annotations

import socket
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
        raise ConfigError(f"--push-to-hub={repo!r} is not a valid repo id ({str(e).splitlines()[0][:100]}) "
                          "(valid: NAME or OWNER/NAME)") from None
    if constants.HF_HUB_OFFLINE:
        raise ConfigError(f"--push-to-hub={repo!r} but HF_HUB_OFFLINE is set (valid: run online, or drop --push-to-hub)")
    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise ConfigError(f"--push-to-hub={repo!r} but {constants.ENDPOINT} is not reachable ({type(e).__name__}) "
                          "(valid: run online, or drop --push-to-hub)") from None


def push_folder(folder: Path, repo: str, what: str = "export") -> str:
    """Create the model repo if needed and upload every file of `folder` (a nexus `what`: export,
    checkpoint); returns the repo URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        url = api.create_repo(repo, repo_type="model", exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model",
                          commit_message=f"Upload nexus {what}")
    except Exception as e:  # auth, permissions, quota: huggingface_hub raises many HTTP error types
        raise ConfigError(f"--push-to-hub={repo!r} failed ({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})"
                          f"; the {what} itself is complete in {str(folder)!r}") from None
    return str(url)
