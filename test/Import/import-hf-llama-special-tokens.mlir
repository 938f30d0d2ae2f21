// Tests that a config.json's special-token ids survive the import and every
// export: one id or a list (Llama 3.1's eos_token_id lists three), kept in
// the form written, in the model configuration; through mlt-opt; in the
// config.json --save-hf writes (which imports to the same module) and in
// the generation_config.json written beside it.

// RUN: mlt-translate --import-hf-llama %S/Inputs/special-tokens.json | FileCheck %s
// RUN: mlt-translate --import-hf-llama %S/Inputs/special-tokens.json | mlt-opt | FileCheck %s
// RUN: rm -rf %t.hf && mlt-run %S/Inputs/special-tokens.json --batch 2 --seq-len 8 \
// RUN:   --steps 1 --save-hf %t.hf | FileCheck %s --check-prefix=SAVED
// RUN: FileCheck %s --check-prefix=CONFIG < %t.hf/config.json
// RUN: FileCheck %s --check-prefix=GENERATION < %t.hf/generation_config.json
// RUN: mlt-translate --import-hf-llama %t.hf > %t.saved.mlir
// RUN: mlt-translate --import-hf-llama %S/Inputs/special-tokens.json | diff %t.saved.mlir -

// CHECK: module attributes {mlt.model = #mlt.llama<{{.*}} tie_word_embeddings = true, bos_token_id = 1, eos_token_id = [2, 3, 4], pad_token_id = 0>}

// SAVED: saved {{.*}}.hf (config.json, model.safetensors, generation_config.json)

// CONFIG:      "bos_token_id": 1,
// CONFIG:      "eos_token_id": [
// CONFIG-NEXT:   2,
// CONFIG-NEXT:   3,
// CONFIG-NEXT:   4
// CONFIG-NEXT: ],
// CONFIG:      "pad_token_id": 0,

// GENERATION:      {
// GENERATION-NEXT:   "_from_model_config": true,
// GENERATION-NEXT:   "bos_token_id": 1,
// GENERATION-NEXT:   "eos_token_id": [
// GENERATION-NEXT:     2,
// GENERATION-NEXT:     3,
// GENERATION-NEXT:     4
// GENERATION-NEXT:   ],
// GENERATION-NEXT:   "pad_token_id": 0
// GENERATION-NEXT: }
