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
// ROPE: mlt-translate: error: {{.*}}bad-rope.json: field 'rope_scaling.rope_type' is 'llama3'; only 'default' rotary embeddings are supported
