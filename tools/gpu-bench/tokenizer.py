"""The tokenizer of a GGUF model as JSON, for `make_model.py` to give a model it makes: the
default model's (SmolLM2) travels to a machine without it this way, 2 MB instead of 100.

    tokenizer.py MODEL.gguf OUT.json
"""

import json
import sys

import gguf

KEYS = [
    "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_space_prefix",
]


def value(field):
    """A field's value: a scalar, a string, or a list of either."""
    kinds = field.types
    if kinds[0] == gguf.GGUFValueType.ARRAY:
        parts = [field.parts[i] for i in field.data]
        if kinds[1] == gguf.GGUFValueType.STRING:
            return [bytes(p).decode("utf-8") for p in parts]
        return [p.tolist()[0] for p in parts]
    part = field.parts[field.data[0]]
    if kinds[0] == gguf.GGUFValueType.STRING:
        return bytes(part).decode("utf-8")
    v = part.tolist()[0]
    return bool(v) if kinds[0] == gguf.GGUFValueType.BOOL else v


def main():
    reader = gguf.GGUFReader(sys.argv[1])
    out = {k: value(reader.fields[k]) for k in KEYS if k in reader.fields}
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
