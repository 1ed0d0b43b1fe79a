"""TinyGPT training step in PyTorch, eager or torch.compile, the peer of
`posttrainllm bench`.

The same model as model/model.go (pre-norm RMSNorm blocks, rotary causal
attention through scaled_dot_product_attention, exact-GELU MLP, tied GPT-2
embedding, float32 master weights cast to the compute dtype in the forward
pass, loss in float32), the same update (N microbatches, gradients averaged,
clipped to a global norm, AdamW, host-computed cosine learning rate) and the
same timing, written the way a PyTorch user writes it: an nn.Module,
loss.backward() per microbatch, clip_grad_norm_ and the fused AdamW; with
--compile the model's forward and loss go through torch.compile.

Under torchrun (WORLD_SIZE > 1) it trains data-parallel with
DistributedDataParallel over NCCL, one GPU per process, each rank with the
preset's batch on its own windows; gradients are all-reduced during the
last microbatch's backward pass (no_sync before it). Rank 0 prints the
result, with tokens per step and per second counting every rank:

    python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/peers/torch_peer.py --preset mega
"""

import contextlib
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class Linear(nn.Module):
    """A bias-free linear layer whose float32 weight [out, in] is cast to the
    compute dtype where it is used."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_out, n_in))

    def forward(self, x):
        return F.linear(x, self.weight.to(x.dtype))


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight.to(x.dtype), self.eps)


def rope(x, cos, sin):
    """Rotary embedding over the whole head, halves rotated (MLX's
    traditional=False): [x1·cos − x2·sin, x1·sin + x2·cos]."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    def __init__(self, m):
        super().__init__()
        d = m["d_model"]
        self.heads, self.hd = m["heads"], d // m["heads"]
        self.wq, self.wk, self.wv, self.wo = Linear(d, d), Linear(d, d), Linear(d, d), Linear(d, d)

    def forward(self, x, cos, sin):
        B, T, D = x.shape
        split = lambda t: t.view(B, T, self.heads, self.hd).transpose(1, 2)
        q = rope(split(self.wq(x)), cos, sin)
        k = rope(split(self.wk(x)), cos, sin)
        v = split(self.wv(x))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(self.hd))
        return self.wo(o.transpose(1, 2).reshape(B, T, D))


class MLP(nn.Module):
    def __init__(self, m):
        super().__init__()
        d, h = m["d_model"], common.hidden(m)
        self.w1, self.w2 = Linear(d, h), Linear(h, d)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    def __init__(self, m):
        super().__init__()
        eps = m["norm_eps"]
        self.attn_norm, self.attn = RMSNorm(m["d_model"], eps), Attention(m)
        self.mlp_norm, self.mlp = RMSNorm(m["d_model"], eps), MLP(m)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class TinyGPT(nn.Module):
    def __init__(self, m):
        super().__init__()
        if not m.get("tied_embeddings") or m.get("embed_norm") or m.get("z_loss"):
            raise SystemExit("torch_peer: only tied embeddings without embed_norm or z_loss are written")
        self.dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[m["dtype"]]
        pv = common.padded_vocab(m)
        self.tok_embeddings = nn.Embedding(pv, m["d_model"])
        # The padding rows' logits are -inf, added as the GEMM's bias.
        mask = None
        if pv > m["vocab_size"]:
            mask = torch.where(torch.arange(pv) < m["vocab_size"], 0.0, float("-inf")).to(self.dtype)
        self.register_buffer("pad_mask", mask, persistent=False)
        self.blocks = nn.ModuleList(Block(m) for _ in range(m["layers"]))
        self.norm = RMSNorm(m["d_model"], m["norm_eps"])
        hd = m["d_model"] // m["heads"]
        inv = m["rope_base"] ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        ang = torch.arange(m["context"], dtype=torch.float32)[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos().to(self.dtype), persistent=False)
        self.register_buffer("sin", ang.sin().to(self.dtype), persistent=False)

    def forward(self, x, y):
        """The loss, as forward, so DistributedDataParallel's hooks see the call."""
        return self.loss(x, y)

    def loss(self, x, y):
        emb = self.tok_embeddings.weight.to(self.dtype)
        T = x.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        h = F.embedding(x, emb)
        for b in self.blocks:
            h = b(h, cos, sin)
        logits = F.linear(self.norm(h), emb, self.pad_mask).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))


def init_params(model, m, seed):
    """model.Init's scheme: norms one, other weights N(0, std²), residual
    projections (attn.wo, mlp.w2) scaled by 1/√(2·layers)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.fill_(1.0)
                continue
            std = m["init_std"]
            if name.endswith("attn.wo.weight") or name.endswith("mlp.w2.weight"):
                std /= math.sqrt(2 * m["layers"])
            p.normal_(0.0, std)


def main():
    def extra(p):
        p.add_argument("--compile", action="store_true", help="torch.compile the forward pass and loss")
        p.add_argument("--compile-mode", default=None,
                       help="torch.compile mode (default: PyTorch's default; e.g. reduce-overhead)")
        p.add_argument("--profile-steps", type=int, default=0,
                       help="after the timed steps, run this many under torch.profiler and report kernels per step")

    args = common.parse_args(__doc__.splitlines()[0], extra)
    cfg = common.load_preset(args)
    m = cfg["model"]
    if not m.get("master_fp32") and m["dtype"] != "float32":
        raise SystemExit("torch_peer: the preset stores parameters in the compute dtype; only float32 masters are written")
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    dev = torch.device("cuda" if args.device == "gpu" else "cpu")
    if world > 1 and dev.type == "cuda":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(dev)
        torch.distributed.init_process_group("nccl", device_id=dev)
    elif world > 1:
        torch.distributed.init_process_group("gloo")  # CPU smoke runs
    model = TinyGPT(m).to(dev)
    init_params(model, m, args.seed)
    ddp = None
    if world > 1:
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    total = args.warmup + args.steps
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=common.cosine_lr(cfg, 0, total), betas=(0.9, 0.95), eps=1e-8,
                            fused=dev.type == "cuda")
    loss_fn = ddp if ddp is not None else model.loss
    name = "pytorch eager"
    if args.compile:
        loss_fn = torch.compile(loss_fn, mode=args.compile_mode)
        name = "pytorch torch.compile" + (f" ({args.compile_mode})" if args.compile_mode else "")
    if world > 1:
        name += f" DDP×{world}"
    n, clip = cfg["accum"], cfg.get("grad_clip", 0.0)
    params = list(model.parameters())

    def step(x, y, lr):
        for g in opt.param_groups:
            g["lr"] = lr
        total_loss = torch.zeros((), device=dev)
        for i in range(n):
            # DDP all-reduces in the last microbatch's backward pass only.
            sync_ctx = ddp.no_sync() if ddp is not None and i < n - 1 else contextlib.nullcontext()
            with sync_ctx:
                loss = loss_fn(x[i], y[i])
                (loss / n).backward()
            total_loss += loss.detach()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip, foreach=dev.type == "cuda")
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total_loss / n

    data = common.Batches(cfg, args.seed + rank)
    timer = common.Timer(args.warmup)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for i in range(total):
        if i == args.warmup and dev.type == "cuda":
            sync()
            torch.cuda.reset_peak_memory_stats()
        start = common.now()
        xs, ys = data.next()
        x = torch.from_numpy(xs).to(dev, dtype=torch.long)
        y = torch.from_numpy(ys).to(dev, dtype=torch.long)
        loss = step(x, y, common.cosine_lr(cfg, i, total))
        value = loss.item()
        timer.record(i, common.now() - start, value)
    peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0
    extra = {"torch_version": torch.__version__}

    def scheduled(i):
        xs, ys = data.next()
        x = torch.from_numpy(xs).to(dev, dtype=torch.long)
        y = torch.from_numpy(ys).to(dev, dtype=torch.long)
        return step(x, y, common.cosine_lr(cfg, args.warmup + i, total))

    def read(loss):
        sync()
        return loss.item()

    sync()
    extra["ms_per_step_pipelined"] = common.pipelined(args.steps, cfg.get("log_every", 10), scheduled, read)
    if args.profile_steps > 0 and dev.type == "cuda":
        def profiled(i):
            xs, ys = data.next()
            x = torch.from_numpy(xs).to(dev, dtype=torch.long)
            y = torch.from_numpy(ys).to(dev, dtype=torch.long)
            step(x, y, common.cosine_lr(cfg, total + i, total)).item()

        extra.update(kernel_profile(args.profile_steps, profiled))
    if world > 1:
        # Every rank ran the same steps; the step time is rank 0's, which
        # waited for the all-reduce. Tokens count every rank's.
        tokens = world * cfg["batch"] * cfg["accum"] * m["context"]
        steps_per_s = len(timer.times) / (sum(timer.times) / 1e3)
        extra.update({"ranks": world, "tokens_per_step": tokens, "tokens_per_s": steps_per_s * tokens})
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
        if rank != 0:
            return
    common.report(name, cfg, args, timer, peak, extra)


def kernel_profile(steps, run):
    """Counts the GPU kernels of `steps` steps with torch.profiler and their
    summed device time, per step, and the names of the slowest."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(steps):
            run(i)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name = {}
    for e in kernels:
        by_name[e.name] = by_name.get(e.name, 0.0) + e.time_range.elapsed_us()
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:8]
    return {
        "kernels_per_step": len(kernels) / steps,
        "kernel_ms_per_step": sum(by_name.values()) / 1e3 / steps,
        "top_kernels_ms_per_step": [[n[:80], t / 1e3 / steps] for n, t in top],
    }


if __name__ == "__main__":
    main()
