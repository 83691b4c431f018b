"""The chat (SFT) template of data/chat.py against its definition, written out here byte by byte: <bos>, each
prompt turn as <|user|> text <|end|>, each reply as <|assistant|> text <eos>; the loss mask 1 exactly on the
reply's tokens and its <eos>. In-process, well under a second (issue 42: chat.py's mutation survivors)."""

from __future__ import annotations

import pytest

from nexus.config import ConfigError
from nexus.data.chat import ChatByteTokenizer, chat_prompt_ids, encode_conversation
from nexus.data.tokenizer import ByteTokenizer
from nexus.data.tokenizer_files import load_tokenizer

BOS, EOS, USER, ASSISTANT, END = 256, 257, 259, 260, 261  # the byte tokenizer's specials, then the three chat ones


def test_the_chat_byte_tokenizer_adds_three_ids_after_the_byte_vocabulary(tmp_path):
    tok = ChatByteTokenizer()
    assert tok.vocab_size == 262 and tok.kind == "byte_chat"
    assert [tok.token_id(s) for s in ("<|user|>", "<|assistant|>", "<|end|>", "<bos>", "<eos>", "<pad>")] == [
        USER,
        ASSISTANT,
        END,
        BOS,
        EOS,
        258,
    ]
    with pytest.raises(KeyError):
        tok.token_id("<|tool|>")
    tok.save(tmp_path)
    assert (tmp_path / "tokenizer.txt").read_text() == "byte_chat\n"
    assert isinstance(load_tokenizer(str(tmp_path)), ChatByteTokenizer)


def test_a_conversation_is_the_template_and_only_replies_are_targets():
    row = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi é"},
            {"role": "assistant", "content": "yo"},
            {"role": "user", "content": "?"},
            {"role": "assistant", "content": ""},
        ]
    }
    ids, mask = encode_conversation(ChatByteTokenizer(), row)
    want = (
        [BOS]
        + [USER]
        + list(b"be brief")
        + [END]
        + [USER]
        + list("hi é".encode())
        + [END]
        + [ASSISTANT]
        + list(b"yo")
        + [EOS]
        + [USER]
        + list(b"?")
        + [END]
        + [ASSISTANT]
        + [EOS]
    )
    want_mask = [0] + [0] * 10 + [0] * (2 + len("hi é".encode())) + [0, 1, 1, 1] + [0, 0, 0] + [0, 1]
    assert ids == want and mask == want_mask
    # the same turns under "conversations", or as a bare list
    assert encode_conversation(ChatByteTokenizer(), {"conversations": row["messages"]}) == (ids, mask)
    assert encode_conversation(ChatByteTokenizer(), row["messages"]) == (ids, mask)


def test_a_generation_prompt_ends_by_opening_the_reply():
    msgs = [{"role": "user", "content": "hi"}]
    assert chat_prompt_ids(ChatByteTokenizer(), msgs) == [BOS, USER, *b"hi", END, ASSISTANT]


def test_a_tokenizer_without_the_chat_specials_is_refused_naming_the_token():
    with pytest.raises(
        ConfigError,
        match=r"^data.chat=true needs the special token <\|user\|> in the tokenizer "
        r"\(valid: data.tokenizer byte or bpe",
    ):
        encode_conversation(ByteTokenizer(), {"messages": [{"role": "user", "content": "x"}]})

    class NoneForUnknown(ChatByteTokenizer):  # a tokenizer that answers None for an unknown token
        def token_id(self, special):
            return None if special == "<|end|>" else super().token_id(special)

    with pytest.raises(ConfigError, match=r"needs the special token <\|end\|>"):
        chat_prompt_ids(NoneForUnknown(), [{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    "row, words",
    [
        ({"messages": []}, "got ['messages']"),
        ({"text": "hello"}, "got ['text']"),
        ("just text", "got str"),
        ({"messages": "hi"}, "got ['messages']"),
    ],
)
def test_a_row_without_a_message_list_is_refused_naming_what_it_had(row, words):
    with pytest.raises(ConfigError) as e:
        encode_conversation(ChatByteTokenizer(), row)
    assert str(e.value).startswith("chat row has no non-empty 'messages' list (") and words in str(e.value)
    assert "valid: {'messages': [{'role': 'user'|'assistant'|'system', 'content': str}, ...]}" in str(e.value)


@pytest.mark.parametrize(
    "msg", [{"role": "tool", "content": "x"}, {"role": "user", "content": 3}, {"content": "x"}, "plain"]
)
def test_a_bad_message_is_refused_naming_it(msg):
    good = {"role": "user", "content": "fine"}  # a good turn before it: every turn is checked, not the first only
    with pytest.raises(ConfigError) as e:
        encode_conversation(ChatByteTokenizer(), {"messages": [good, msg]})
    assert str(e.value) == f"chat message {str(msg)!r} (valid: {{'role': user|assistant|system, 'content': str}})"


def test_a_long_bad_message_is_cut_at_80_characters():
    msg = {"role": "narrator", "content": "w" * 300}
    with pytest.raises(ConfigError) as e:
        encode_conversation(ChatByteTokenizer(), {"messages": [msg]})
    assert f"chat message {str(msg)[:80]!r} " in str(e.value) and "w" * 100 not in str(e.value)
