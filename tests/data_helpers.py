"""Helpers the data tests share."""


def byte_documents(ids, eos: int) -> list[str]:
    """Byte-tokenizer ids cut at EOS and decoded: the documents of a token stream (the tail after the last EOS
    is dropped; every document nexus writes ends with one)."""
    docs, cur = [], []
    for t in ids:
        if t == eos:
            docs.append(bytes(cur).decode())
            cur = []
        else:
            cur.append(int(t))
    return docs
