"""Checks that a checkpoint written by `mlt-run --save-hf` loads unchanged in HF
transformers and computes the loss mlt computed for it.

Usage (where PyTorch + transformers are installed, e.g. the GPU machines):
  python3 hf_load_check.py MODEL_DIR TOKENS.txt BATCH SEQ_LEN EXPECTED_LOSS

TOKENS.txt is read as bytes (the byte-level tokenizer); the batch is its first
BATCH windows of SEQ_LEN + 1 tokens, as `mlt-run --no-shuffle` takes step 1's.
Prints one JSON line; exits 1 if the losses differ by more than 1e-5 relative.
"""
import json, sys
import torch
from transformers import LlamaForCausalLM

model_dir, tokens_path, batch, seq, expected = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
data = open(tokens_path, "rb").read()
rows = [list(data[i * (seq + 1):(i + 1) * (seq + 1)]) for i in range(batch)]
tokens = torch.tensor(rows, dtype=torch.long)
model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float64)
model.eval()
with torch.no_grad():
    logits = model(input_ids=tokens[:, :-1]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)).item()
rel = abs(loss - expected) / abs(expected)
print(json.dumps({"model_dir": model_dir, "params": sum(p.numel() for p in model.parameters()),
                  "hf_loss": loss, "mlt_loss": expected, "relative_difference": rel, "ok": rel <= 1e-5}))
sys.exit(0 if rel <= 1e-5 else 1)
