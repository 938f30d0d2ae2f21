// Tests that a config.json the importer cannot use fails with one error line
// naming the file and the offending field, and no output.

// RUN: not mlt-translate --import-hf-llama %S/Inputs/bad-missing-field.json 2>&1 | FileCheck %s --check-prefix=MISSING --implicit-check-not={{.}}
// MISSING: mlt-translate: error: {{.*}}bad-missing-field.json: missing field 'hidden_size'

// RUN: not mlt-translate --import-hf-llama %S/Inputs/bad-type.json 2>&1 | FileCheck %s --check-prefix=TYPE --implicit-check-not={{.}}
// TYPE: mlt-translate: error: {{.*}}bad-type.json: field 'num_hidden_layers' must be an integer, got "2"

// RUN: not mlt-translate --import-hf-llama %S/Inputs/bad-json.json 2>&1 | FileCheck %s --check-prefix=JSON --implicit-check-not={{.}}
// JSON: mlt-translate: error: {{.*}}bad-json.json: not valid JSON: [8:1, byte={{[0-9]+}}]: Expected object key

// RUN: not mlt-translate --import-hf-llama %S/Inputs/bad-heads.json 2>&1 | FileCheck %s --check-prefix=HEADS --implicit-check-not={{.}}
// HEADS: mlt-translate: error: {{.*}}bad-heads.json: hidden_size (64) is not divisible by num_attention_heads (6), and no 'head_dim' is given

// RUN: not mlt-translate --import-hf-llama %S/Inputs/bad-kv-heads.json 2>&1 | FileCheck %s --check-prefix=KV --implicit-check-not={{.}}
// KV: mlt-translate: error: {{.*}}bad-kv-heads.json: num_attention_heads (4) must be a multiple of num_key_value_heads (3)

// RUN: not mlt-translate --import-hf-llama %S/Inputs/bad-rope.json 2>&1 | FileCheck %s --check-prefix=ROPE --implicit-check-not={{.}}
// ROPE: mlt-translate: error: {{.*}}bad-rope.json: field 'rope_scaling.rope_type' is 'yarn'; only 'default' and 'llama3' rotary embeddings are supported

// RUN: not mlt-translate --import-hf-llama %S/Inputs/bad-token-id.json 2>&1 | FileCheck %s --check-prefix=TOKEN --implicit-check-not={{.}}
// TOKEN: mlt-translate: error: {{.*}}bad-token-id.json: field 'eos_token_id' must be an integer or a list of integers, got "2"

// Llama 3.1's rotary scaling: each field checked, named with its object.

// RUN: not mlt-translate --import-hf-llama %S/Inputs/bad-llama3-factor.json 2>&1 | FileCheck %s --check-prefix=L3FACTOR --implicit-check-not={{.}}
// L3FACTOR: mlt-translate: error: {{.*}}bad-llama3-factor.json: rope_scaling: llama3 rope scaling: factor must be at least 1, got 0.5

// RUN: not mlt-translate --import-hf-llama %S/Inputs/bad-llama3-missing.json 2>&1 | FileCheck %s --check-prefix=L3MISSING --implicit-check-not={{.}}
// L3MISSING: mlt-translate: error: {{.*}}bad-llama3-missing.json: rope_scaling: missing field 'low_freq_factor' (llama3 rope scaling needs it)

// RUN: not mlt-translate --import-hf-llama %S/Inputs/bad-llama3-order.json 2>&1 | FileCheck %s --check-prefix=L3ORDER --implicit-check-not={{.}}
// L3ORDER: mlt-translate: error: {{.*}}bad-llama3-order.json: rope_scaling: llama3 rope scaling: high_freq_factor (1) must be greater than low_freq_factor (4)

// RUN: not mlt-translate --import-hf-llama %S/Inputs/bad-llama3-type.json 2>&1 | FileCheck %s --check-prefix=L3TYPE --implicit-check-not={{.}}
// L3TYPE: mlt-translate: error: {{.*}}bad-llama3-type.json: rope_scaling: field 'original_max_position_embeddings' must be an integer, got "8192"

// RUN: not mlt-translate --import-hf-llama %S/Inputs/bad-llama3-disagree.json 2>&1 | FileCheck %s --check-prefix=L3DISAGREE --implicit-check-not={{.}}
// L3DISAGREE: mlt-translate: error: {{.*}}bad-llama3-disagree.json: fields 'rope_parameters' and 'rope_scaling' describe different rotary embeddings

// mlt-run reads config.json with the same importer.
// RUN: not mlt-run %S/Inputs/bad-llama3-order.json --batch 1 --seq-len 8 --steps 1 2>&1 | FileCheck %s --check-prefix=RUNL3 --implicit-check-not={{.}}
// RUNL3: {{.*}}bad-llama3-order.json: rope_scaling: llama3 rope scaling: high_freq_factor (1) must be greater than low_freq_factor (4)
