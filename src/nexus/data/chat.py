"""Chat (SFT) template: multi-turn conversations -> token ids + a loss mask on assistant tokens only.

Template, with special tokens (never produced by encoding ordinary text):

    <bos> <|user|> user text <|end|> <|assistant|> reply <eos> <|user|> ... <|assistant|> reply <eos>

* user and system turns end with <|end|>; assistant turns end with <eos>, so a generator that stops
  at EOS (`nexus generate --chat`) stops at the end of one reply;
* loss_mask[i] = 1 iff token i is something the model must learn to produce: the assistant's reply
  tokens and the <eos> that closes it. Everything the user side wrote, and the role markers, are
  context only. (The data loader aligns the mask with the shifted targets.)

The byte tokenizer has only <bos>/<eos>/<pad>; ChatByteTokenizer extends it with the three chat
specials as ids 259..261 (chosen by the loader when data.chat is on), so plain byte models keep
their 259-token vocabulary. The BPE tokenizer already reserves <|user|>, <|assistant|>, <|end|>.
"""

from __future__ import annotations

from pathlib import Path

from ..config import ConfigError
from .tokenizer import ByteTokenizer

CHAT_SPECIALS = ("<|user|>", "<|assistant|>", "<|end|>")
PROMPT_ROLES = ("user", "system")  # context turns, not trained on
REPLY_ROLE = "assistant"


class ChatByteTokenizer(ByteTokenizer):
    """Byte tokenizer + <|user|> 259, <|assistant|> 260, <|end|> 261 (vocab 262)."""

    kind = "byte_chat"

    def __init__(self):
        super().__init__()
        self.user_id, self.assistant_id, self.end_id = 259, 260, 261
        self.vocab_size = 262

    def token_id(self, special: str) -> int:
        extra = dict(zip(CHAT_SPECIALS, (self.user_id, self.assistant_id, self.end_id)))
        return extra[special] if special in extra else super().token_id(special)

    def save(self, directory: Path) -> None:
        (Path(directory) / "tokenizer.txt").write_text("byte_chat\n")


def _special(tok, name: str) -> int:
    try:
        i = tok.token_id(name)
    except KeyError:
        i = None
    if i is None:
        raise ConfigError(
            f"data.chat=true needs the special token {name} in the tokenizer (valid: data.tokenizer "
            f"byte or bpe, which reserve <|user|>, <|assistant|>, <|end|>)"
        )
    return i


def _messages(row) -> list:
    msgs = row.get("messages", row.get("conversations")) if isinstance(row, dict) else row
    if not isinstance(msgs, list) or not msgs:
        keys = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise ConfigError(
            f"chat row has no non-empty 'messages' list (got {keys}; valid: "
            "{'messages': [{'role': 'user'|'assistant'|'system', 'content': str}, ...]})"
        )
    for m in msgs:
        role = m.get("role") if isinstance(m, dict) else None
        if role not in PROMPT_ROLES + (REPLY_ROLE,) or not isinstance(m.get("content"), str):
            raise ConfigError(
                f"chat message {str(m)[:80]!r} (valid: {{'role': user|assistant|system, 'content': str}})"
            )
    return msgs


def encode_conversation(tok, row) -> tuple[list[int], list[int]]:
    """-> (ids, loss_mask) for one conversation row ({'messages': [...]})."""
    user, assistant, end = (_special(tok, s) for s in CHAT_SPECIALS)
    ids = [tok.bos_id]
    mask = [0]
    for m in _messages(row):
        text = tok.encode(m["content"])
        if m["role"] == REPLY_ROLE:
            ids += [assistant] + text + [tok.eos_id]
            mask += [0] + [1] * (len(text) + 1)
        else:
            ids += [user] + text + [end]
            mask += [0] * (len(text) + 2)
    return ids, mask


def chat_prompt_ids(tok, messages: list[dict]) -> list[int]:
    """Prompt for generation: the conversation so far, then <|assistant|> so the model writes a reply."""
    ids, _ = encode_conversation(tok, {"messages": messages})
    return ids + [_special(tok, "<|assistant|>")]
