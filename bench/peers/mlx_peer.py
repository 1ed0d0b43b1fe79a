"""TinyGPT training step in MLX Python, the peer of `posttrainllm bench`.

The same model as model/model.go (pre-norm RMSNorm blocks, rotary causal
attention through mx.fast, GELU MLP (exact or tanh, as the preset or
--gelu says), tied or untied output head, float32 master weights cast to
the compute dtype in the forward pass, loss in float32), the same update
(N microbatches unrolled, gradients averaged, clipped to a global norm,
AdamW with bias correction, host-computed cosine learning rate) and the
same timing, written the way an MLX user writes it: an nn.Module and one
step compiled with mx.compile(step, inputs=state, outputs=state), or run
op by op with --compile 0.

On the CPU, run it on the project's own libmlx.so: `make peers` installs
the MLX Python wheel into .deps/peers/python with its library linked to
.deps/mlx (bench/peers/install-python.sh), and bench/peers/compare.py sets
PYTHONPATH to it. The JSON line names the libmlx.so the process loaded.
"""

import math
from functools import partial

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten, tree_map, tree_unflatten

import common


class Linear(nn.Module):
    """A bias-free linear layer whose float32 weight [out, in] is cast to the
    compute dtype where it is used."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = mx.zeros((n_out, n_in))

    def __call__(self, x):
        return x @ self.weight.astype(x.dtype).T


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = mx.ones((d,))
        self.eps = eps

    def __call__(self, x):
        return mx.fast.rms_norm(x, self.weight.astype(x.dtype), self.eps)


class Attention(nn.Module):
    def __init__(self, m):
        super().__init__()
        d = m["d_model"]
        self.heads, self.hd, self.base = m["heads"], d // m["heads"], float(m["rope_base"])
        self.wq, self.wk, self.wv, self.wo = Linear(d, d), Linear(d, d), Linear(d, d), Linear(d, d)

    def __call__(self, x):
        B, T, D = x.shape
        split = lambda t: t.reshape(B, T, self.heads, self.hd).transpose(0, 2, 1, 3)
        rope = lambda t: mx.fast.rope(t, self.hd, traditional=False, base=self.base, scale=1.0, offset=0)
        q, k, v = rope(split(self.wq(x))), rope(split(self.wk(x))), split(self.wv(x))
        o = mx.fast.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(self.hd), mask="causal")
        return self.wo(o.transpose(0, 2, 1, 3).reshape(B, T, D))


class MLP(nn.Module):
    def __init__(self, m):
        super().__init__()
        d, h = m["d_model"], common.hidden(m)
        self.w1, self.w2 = Linear(d, h), Linear(h, d)
        self.tanh = m["gelu"] == "tanh"

    def __call__(self, x):
        h = self.w1(x)
        if self.tanh:  # GPT-2's approximation, as nn.gelu_approx
            return self.w2(0.5 * h * (1 + mx.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h * h * h))))
        return self.w2(h * 0.5 * (1 + mx.erf(h * (1 / math.sqrt(2)))))


class Block(nn.Module):
    def __init__(self, m):
        super().__init__()
        eps = m["norm_eps"]
        self.attn_norm, self.attn = RMSNorm(m["d_model"], eps), Attention(m)
        self.mlp_norm, self.mlp = RMSNorm(m["d_model"], eps), MLP(m)

    def __call__(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class TinyGPT(nn.Module):
    def __init__(self, m):
        super().__init__()
        if m.get("embed_norm") or m.get("z_loss"):
            raise SystemExit("mlx_peer: embed_norm and z_loss are not written")
        self.dtype = {"bfloat16": mx.bfloat16, "float16": mx.float16, "float32": mx.float32}[m["dtype"]]
        pv = common.padded_vocab(m)
        self.tok_embeddings = nn.Embedding(pv, m["d_model"])
        self.blocks = [Block(m) for _ in range(m["layers"])]
        self.norm = RMSNorm(m["d_model"], m["norm_eps"])
        if not m.get("tied_embeddings"):
            self.output = Linear(m["d_model"], pv)
        # The padding rows' logits are -inf, added as the GEMM's bias; kept
        # off the module's parameter tree.
        mask = None
        if pv > m["vocab_size"]:
            mask = mx.where(mx.arange(pv) < m["vocab_size"], 0.0, -mx.inf).astype(self.dtype)
        object.__setattr__(self, "pad_mask", mask)

    def __call__(self, tokens):
        emb = self.tok_embeddings.weight.astype(self.dtype)
        x = emb[tokens]
        for b in self.blocks:
            x = b(x)
        head = emb if "output" not in self else self.output.weight.astype(self.dtype)
        if self.pad_mask is not None:
            return mx.addmm(self.pad_mask, self.norm(x), head.T)
        return self.norm(x) @ head.T

    def loss(self, x, y):
        logits = self(x).astype(mx.float32)
        lse = mx.logsumexp(logits, axis=-1)
        target = mx.take_along_axis(logits, y[..., None], axis=-1).squeeze(-1)
        return (lse - target).mean()


def init_params(model, m, seed):
    """model.Init's scheme: norms one, other weights N(0, std²), residual
    projections (attn.wo, mlp.w2) scaled by 1/√(2·layers); float32 masters."""
    mx.random.seed(seed)
    new = []
    for name, p in tree_flatten(model.parameters()):
        if p.ndim == 1:
            new.append((name, mx.ones(p.shape)))
            continue
        std = m["init_std"]
        if name.endswith("attn.wo.weight") or name.endswith("mlp.w2.weight"):
            std /= math.sqrt(2 * m["layers"])
        new.append((name, mx.random.normal(p.shape) * std))
    model.update(tree_unflatten(new))


def main():
    args = common.parse_args(__doc__.splitlines()[0], lambda p: p.add_argument(
        "--compile", type=int, choices=[0, 1], default=1,
        help="1: compile the whole step (default); 0: run it op by op"))
    cfg = common.load_preset(args)
    m = cfg["model"]
    if not m.get("master_fp32") and m["dtype"] != "float32":
        raise SystemExit("mlx_peer: the preset stores parameters in the compute dtype; only float32 masters are written")
    mx.set_default_device(mx.gpu if args.device == "gpu" else mx.cpu)
    model = TinyGPT(m)
    init_params(model, m, args.seed)
    total = args.warmup + args.steps
    opt = optim.AdamW(learning_rate=common.cosine_lr(cfg, 0, total), betas=[0.9, 0.95], eps=1e-8,
                      weight_decay=0.1, bias_correction=True)
    opt.init(model.trainable_parameters())
    n, clip = cfg["accum"], cfg.get("grad_clip", 0.0)
    loss_and_grad = nn.value_and_grad(model, lambda mdl, x, y: mdl.loss(x, y))
    state = [model.state, opt.state]

    def step(x, y):
        loss, grads = loss_and_grad(model, x[0], y[0])
        for i in range(1, n):
            l, g = loss_and_grad(model, x[i], y[i])
            loss = loss + l
            grads = tree_map(mx.add, grads, g)
        if n > 1:
            loss = loss / n
            grads = tree_map(lambda g: g / n, grads)
        if clip > 0:
            grads, norm = optim.clip_grad_norm(grads, clip)
        opt.update(model, grads)
        return loss

    if args.compile:
        step = partial(mx.compile, inputs=state, outputs=state)(step)

    data = common.Batches(cfg, args.seed)
    timer = common.Timer(args.warmup)
    for i in range(total):
        if i == args.warmup:
            mx.reset_peak_memory()
        timer.start(i)
        start = common.now()
        xs, ys = data.next()
        opt.learning_rate = mx.array(common.cosine_lr(cfg, i, total), dtype=mx.float32)
        loss = step(mx.array(xs), mx.array(ys))
        mx.eval(loss, state)
        value = loss.item()
        timer.record(i, common.now() - start, value)
    peak = mx.get_peak_memory()

    def scheduled(i):
        xs, ys = data.next()
        opt.learning_rate = mx.array(common.cosine_lr(cfg, args.warmup + i, total), dtype=mx.float32)
        loss = step(mx.array(xs), mx.array(ys))
        mx.async_eval(loss, state)
        return loss

    def read(loss):
        mx.eval(loss, state)
        return loss.item()

    pipelined = common.pipelined(args.steps, cfg.get("log_every", 10), scheduled, read)
    mode = "compiled" if args.compile else "interpreted"
    common.report("mlx-python " + mode, cfg, args, timer, peak,
                  {"ms_per_step_pipelined": pipelined, "mlx_version": mx.__version__, "default_device": str(mx.default_device()),
                   "gelu": m["gelu"], "libmlx": common.loaded_library("libmlx")})


if __name__ == "__main__":
    main()
