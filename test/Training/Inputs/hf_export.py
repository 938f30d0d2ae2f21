#!/usr/bin/env python3
"""Helpers of the HF export tests (hf-export.test and
hf-export-transformers.test).

  hf_export.py model DIR                 makes DIR an HF model directory
                                         around the tokenizer.json in it
                                         (data_tools.py bpe): config.json of
                                         a tiny LLaMA of the tokenizer's
                                         vocabulary, its bos/eos ids the
                                         tokenizer's, and the tokenizer's
                                         tokenizer_config.json (as Llama 3
                                         ships: PreTrainedTokenizerFast) and
                                         special_tokens_map.json
  hf_export.py hf-tokens EXPORT TEXT OUT.u16 N
                                         the first N + 1 ids of TEXT's
                                         opening, tokenized by
                                         AutoTokenizer.from_pretrained(EXPORT),
                                         as a .u16 token file for mlt-run
  hf_export.py hf-loss EXPORT TOKENS.u16 LOG.jsonl
                                         HF's loss of those tokens by
                                         AutoModelForCausalLM (f32, on the
                                         CPU) against mlt's first logged
                                         loss of them: equal to 1e-5
                                         (relative)

The hf-* commands need torch and transformers. Prints one line per result;
exits 1 on a failed check.
"""
import json
import os
import struct
import sys


def model(directory):
    from tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    bos, eos = "<|begin_of_text|>", "<|end_of_text|>"
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "vocab_size": tokenizer.get_vocab_size(),
        "hidden_size": 64,
        "intermediate_size": 176,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": tokenizer.token_to_id(bos),
        "eos_token_id": tokenizer.token_to_id(eos),
    }
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast",
                   "bos_token": bos, "eos_token": eos, "unk_token": "<unk>",
                   "model_max_length": 256}, f, indent=2)
    with open(os.path.join(directory, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": bos, "eos_token": eos, "unk_token": "<unk>"},
                  f, indent=2)
    print(f"ok: {directory}: vocab {config['vocab_size']}, bos "
          f"{config['bos_token_id']}, eos {config['eos_token_id']}")
    return 0


def hf_tokens(export, text_path, out, count):
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(export)
    with open(text_path, encoding="utf-8") as f:
        text = f.read(20000)
    ids = tokenizer(text)["input_ids"][:count + 1]
    if len(ids) != count + 1 or max(ids) >= 65536:
        print(f"FAIL: {len(ids)} ids, largest {max(ids)}")
        return 1
    with open(out, "wb") as f:
        f.write(struct.pack(f"<{len(ids)}H", *ids))
    print(f"ok: {len(ids)} ids from {type(tokenizer).__name__}, the first "
          f"{ids[0]} ({tokenizer.convert_ids_to_tokens(ids[0])})")
    return 0


def hf_loss(export, tokens_path, log_path):
    import torch
    from transformers import AutoModelForCausalLM
    with open(tokens_path, "rb") as f:
        data = f.read()
    ids = list(struct.unpack(f"<{len(data) // 2}H", data))
    model = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        batch = torch.tensor([ids])
        # (HF shifts: the logits of positions 0..N-1 against ids 1..N, the
        # sample mlt-run reads as inputs ids[:N], labels ids[1:])
        hf = model(input_ids=batch, labels=batch).loss.item()
    with open(log_path) as f:
        mlt = json.loads(f.readline())["loss"]
    relative = abs(hf - mlt) / max(abs(hf), 1e-12)
    if relative > 1e-5:
        print(f"FAIL: HF's loss {hf:.8f}, mlt's {mlt:.8f}: {relative:.2e} "
              f"apart")
        return 1
    print(f"ok: HF's loss {hf:.6f} equals mlt's {mlt:.6f} (relative "
          f"difference {relative:.1e}, at most 1e-5)")
    return 0


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "model":
        return model(args[0])
    if command == "hf-tokens":
        return hf_tokens(args[0], args[1], args[2], int(args[3]))
    if command == "hf-loss":
        return hf_loss(args[0], args[1], args[2])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
