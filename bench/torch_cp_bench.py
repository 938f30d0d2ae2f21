"""Peer measurement for context parallelism: PyTorch FSDP2 + context parallel training HF's LLaMA.

The PyTorch reference of issue 37, written as torchtitan writes it: FSDP2 (`fully_shard` per
decoder layer, bf16 parameters in compute, fp32 gradient reduction and fused AdamW) over the
flattened dp x cp mesh (torchtitan's "dp_shard_cp"); forward, loss and backward inside
`torch.distributed.tensor.experimental.context_parallel` (ring attention on SDPA's flash kernel,
head-tail load balancing, keys and values rotated by all-gather or all-to-all); per-layer
torch.compile and full activation checkpointing as options. Same model shapes, MFU convention and
timing as hf_llama_bench.py (CUDA events over the timed steps after the warm-up steps). Random
tokens, the same on the cp ranks of a data-parallel group, drawn anew each step.

Run under torchrun, one process per GPU (world = dp x cp; --cp defaults to the world):
  torchrun --nproc-per-node 2 torch_cp_bench.py --config llama-3.2-1b --seq 32768 --compile
  torchrun --nproc-per-node 2 torch_cp_bench.py --config llama-3.1-8b --seq 65536 --compile --ac full
Rank 0 prints one JSON line: tokens/s per GPU and in all, TFLOP/s and MFU per GPU, the loss of the
last step and of every step (warm-up ones first; each the mean over all ranks' tokens), peak memory
of GPU 0, and the settings used.

What it follows (read in torch 2.11.0, transformers 5.17.0, torchtitan v0.2.0/v0.2.1, the last
torchtitan releases on the `context_parallel` context manager; later ones shard by hand through
`_context_parallel_shard` and `_ContextParallel` on their own attention module):
- torchtitan/train.py `forward_backward_step`: the CP buffers are the inputs, the labels and the
  rope table (seq dims 1, 1, 0), inputs and labels not restored; the model, the loss and the
  backward all run inside the context; `del pred` before the backward. HF's rope takes positions,
  not a table: they are sharded with the tokens instead ([mb, seq], seq dim 1), as torchtitan's
  later distributed/context_parallel.py `prepare_context_parallel_input` shards its positions.
- torchtitan/distributed/utils.py `create_context_parallel_ctx`: `set_rotate_method`, then
  `context_parallel(cp_mesh, buffers=, buffer_seq_dims=, no_restore_buffers=)`.
- torchtitan/distributed/parallel_dims.py: mesh (dp, cp), FSDP over the flattened "dp_shard_cp",
  the data drawn per dp rank (cp ranks share a batch); the sequence divisible by 2 x cp.
- torchtitan/models/llama3/infra/parallelize.py: `apply_ac`, then `apply_compile` (torch.compile
  of each block, fullgraph=True), then `apply_fsdp` (the embedding, each block, [norm, output]
  without resharding after forward, the root); distributed/activation_checkpoint.py: full AC is
  `checkpoint_wrapper(block, preserve_rng_state=False)`; components/loss.py: cross entropy on
  `pred.flatten(0, 1).float()`, compiled with the model; datasets/hf_datasets.py: input =
  tokens[:-1], label = tokens[1:] (shifted before sharding, so the loss is exact under CP);
  models/attention.py: SDPA inside `sdpa_kernel`.
- torch/distributed/tensor/experimental/_context_parallel/_attention.py: `context_parallel`
  patches F.scaled_dot_product_attention for the context, making q, k, v (and any tensor argument,
  a mask too) DTensors sharded on dim 2 and running the ring on the flash, efficient or cuDNN op;
  load balancing (`_cp_options.enable_load_balance`, the head-tail balancer) needs is_causal=True.
- transformers/models/llama/modeling_llama.py and integrations/sdpa_attention.py: HF's decoder
  layers call SDPA with attn_mask=None, is_causal=True (and enable_gqa=True) when the mask they
  are given is None. LlamaModel.forward is not used: its create_causal_mask (masking_utils.py)
  reads the load-balanced positions (e.g. 0..8191 then 24576..32767 on cp rank 0) as packed
  sequences (find_packed_sequence_indices) and would build a 4-D mask, which CP cannot take.
  Net.forward below is LlamaModel.forward without the mask and the cache: embeddings, the rope
  table from the global positions of the local tokens, the decoder layers, norm, lm_head.
"""
import argparse, contextlib, json, os, sys, time
import torch, torch.distributed as dist, torch.nn.functional as F
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_llama_bench import CONFIGS as HF_CONFIGS, PEAK, flops_per_token

LLAMA3_ROPE = dict(rope_type="llama3", low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)
CONFIGS = {**HF_CONFIGS,
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256, seq=32768, mb=1, tie_word_embeddings=True,
                         rope_theta=500000.0, rope_scaling=dict(LLAMA3_ROPE, factor=32.0)),
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256, seq=65536, mb=1, tie_word_embeddings=False,
                         rope_theta=500000.0, rope_scaling=dict(LLAMA3_ROPE, factor=8.0)),
}


def make_config(name, seq):
    c = {k: v for k, v in CONFIGS[name].items() if k not in ("seq", "mb")}
    c.setdefault("tie_word_embeddings", False)
    if "rope_scaling" in c:  # Llama 3: its norm eps; max_position_embeddings as in HF's config.json
        c.update(rms_norm_eps=1e-5, max_position_embeddings=max(seq, 131072))
    return LlamaConfig(**{"max_position_embeddings": seq, **c}, attn_implementation="sdpa")


class Net(torch.nn.Module):
    """HF's LlamaForCausalLM, run as LlamaModel.forward runs it less the mask (see above)."""

    def __init__(self, hf):
        super().__init__()
        self.hf = hf

    def forward(self, ids, pos):
        m = self.hf.model
        h = m.embed_tokens(ids)
        rope = m.rotary_emb(h, pos)  # cos, sin of the tokens' global positions
        for layer in m.layers:
            h = layer(h, attention_mask=None, position_embeddings=rope)
        return self.hf.lm_head(m.norm(h))


def build(a, cfg, mesh, dev):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    torch.manual_seed(0)
    with torch.device("meta"):
        net = Net(LlamaForCausalLM(cfg))
    m, tied = net.hf.model, cfg.tie_word_embeddings
    for i, layer in enumerate(m.layers):  # torchtitan's order: AC, then compile, then FSDP
        if a.ac == "full":
            layer = checkpoint_wrapper(layer, preserve_rng_state=False)
        if a.compile:
            layer = torch.compile(layer, fullgraph=True)
        m.layers[i] = layer
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if not tied:  # a tied embedding is lm_head's weight: both stay in the root's group
        fully_shard(m.embed_tokens, mesh=mesh, mp_policy=mp)
    for layer in m.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    if not tied:
        fully_shard([m.norm, net.hf.lm_head], mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    fully_shard(net, mesh=mesh, mp_policy=mp)
    net.to_empty(device=dev)
    with torch.no_grad():
        for p in net.parameters():  # RMSNorm weights 1, matrices N(0, 0.02) (HF's initializer_range)
            p.fill_(1.0) if p.ndim == 1 else p.normal_(0.0, 0.02)
        fresh = type(m.rotary_emb)(config=cfg)  # to_empty left the rope buffers uninitialized
        for name, b in fresh.named_buffers():
            getattr(m.rotary_emb, name).copy_(b)
    return net


def cross_entropy(logits, labels):  # torchtitan's loss: the mean over the local tokens
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="llama-3.2-1b", choices=sorted(CONFIGS))
    ap.add_argument("--seq", type=int, help="global sequence length (default: the config's)")
    ap.add_argument("--mb", type=int, default=1, help="sequences a step per data-parallel group")
    ap.add_argument("--cp", type=int, help="context-parallel degree (default: the world size)")
    ap.add_argument("--rotate", choices=["allgather", "alltoall"], default="allgather")
    ap.add_argument("--ac", choices=["none", "full"], default="none")
    ap.add_argument("--compile", action="store_true", help="torch.compile of each decoder layer and of the loss")
    ap.add_argument("--sdpa", choices=["flash", "cudnn"], default="flash",
                    help="flash: flash then efficient; cudnn: cuDNN first, as torchtitan's SDPA wrapper")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    seq = a.seq or CONFIGS[a.config]["seq"]
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    cp = a.cp or world
    assert world % cp == 0, f"world {world} is not a multiple of cp {cp}"
    assert cp == 1 or seq % (2 * cp) == 0, f"load balancing needs the sequence ({seq}) divisible by 2 x cp ({2 * cp})"
    dp = world // cp

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import _cp_options, set_rotate_method
    from torch.nn.attention import SDPBackend, sdpa_kernel
    mesh = init_device_mesh("cuda", (dp, cp), mesh_dim_names=("dp", "cp"))
    fsdp_mesh, cp_mesh = mesh._flatten("dp_shard_cp"), mesh["cp"]
    _cp_options.enable_load_balance = True  # the default; head-tail: rank r holds chunks r and 2cp-1-r
    set_rotate_method(a.rotate)
    backends = ([SDPBackend.CUDNN_ATTENTION] if a.sdpa == "cudnn" else []) + \
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]

    cfg = make_config(a.config, seq)
    net = build(a, cfg, fsdp_mesh, dev)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True)
    loss_fn = torch.compile(cross_entropy) if a.compile else cross_entropy
    gen = torch.Generator(device=dev).manual_seed(1234 + mesh["dp"].get_local_rank())

    def step():
        t = torch.randint(0, cfg.vocab_size, (a.mb, seq + 1), device=dev, generator=gen)
        # shifted before sharding; each its own storage: context_parallel resizes and overwrites its buffers in
        # place, and at mb 1 .contiguous() would leave ids and labels overlapping views of t
        ids, labels = (x.clone(memory_format=torch.contiguous_format) for x in (t[:, :-1], t[:, 1:]))
        pos = torch.arange(seq, device=dev).repeat(a.mb, 1)  # [mb, seq]: sharded like the tokens
        bufs = [ids, labels, pos]
        ctx = context_parallel(cp_mesh, buffers=bufs, buffer_seq_dims=[1, 1, 1], no_restore_buffers=set(bufs)) \
            if cp > 1 else contextlib.nullcontext()
        with ctx, sdpa_kernel(backends, set_priority=True):  # ids, labels, pos: [mb, seq / cp] in here
            logits = net(ids, pos)
            loss = loss_fn(logits, labels)
            del logits
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    t0 = time.time()
    losses = [step() for _ in range(a.warmup)]
    torch.cuda.synchronize()
    warm = time.time() - t0
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.steps):
        losses.append(step())
    end.record()
    torch.cuda.synchronize()
    dt = start.elapsed_time(end) / 1e3 / a.steps
    losses = torch.stack(losses)  # each rank's mean over its equal share of the tokens: the mean of means
    dist.all_reduce(losses)
    losses = [round(float(x) / world, 4) for x in losses]
    tok = a.mb * seq * dp / dt / world  # tokens per second per GPU
    fpt = flops_per_token(CONFIGS[a.config], seq)
    if rank == 0:
        mode = "fsdp-cp" + ("-compile" if a.compile else "") + ("-ac" if a.ac == "full" else "")
        print(json.dumps(dict(system="torch-" + mode, model=a.config, world=world, dp=dp, cp=cp, mb=a.mb, seq=seq,
                              rotate=a.rotate, ac=a.ac, compile=a.compile, sdpa=a.sdpa, load_balance=cp > 1,
                              steps=a.steps, warmup=a.warmup, step_s=round(dt, 4), tokens_per_s_per_gpu=round(tok),
                              tokens_per_s=round(tok * world), tflops_per_gpu=round(tok * fpt / 1e12, 1),
                              mfu=round(tok * fpt / PEAK, 3), loss=losses[-1], losses=losses, warmup_s=round(warm, 1),
                              peak_mem_gib=round(torch.cuda.max_memory_allocated() / 2**30, 1),
                              gpu=torch.cuda.get_device_name(0), torch=torch.__version__,
                              transformers=transformers.__version__)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
