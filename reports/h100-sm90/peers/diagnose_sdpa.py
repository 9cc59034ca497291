"""Why the SDPA backends failed where they did on the H100 (run there: python reports/h100-sm90/peers/diagnose_sdpa.py).

Each question takes the failing case's own inputs (conformance.inputs) and answers with numbers:

1. sdpa:cudnn, causal Sq > Sk: is the error confined to the rows that see no key, and what
   does cuDNN return there (0, as the operator and torch's math backend do, or the mean of V,
   as a softmax over a row of equal large negative scores would give)?
2. sdpa:flash, GQA dK: is dK (enable_gqa) the fp32 sum of per-query-head dK already rounded
   to fp16 (FlashAttention-2's backward writes the per-head dK/dV in the input dtype and sums
   the group afterwards), and how does its error compare with the fp32-summed alternative?
3. sdpa:flash, +Inf in q, backward: what log-normalizer does the flash forward store for the
   poisoned row, and which dV entries come back finite?
"""

import torch

from conformance import backends
from conformance.catalog import Case
from conformance.inputs import make_inputs
from conformance.peers.sdpa import adapter, bottom_right_mask
from reference import REFERENCE, attention_backward, attention_forward


def inputs_of(case_id: str):
    case = Case.from_id(case_id)
    return case, make_inputs(case, "cuda")


def cudnn_empty_rows():
    case, inputs = inputs_of("flash_attention.fwd[fp16,d64,causal,B1,H4,Hkv4,Sq1024,Sk509,seed0]")
    q, k, v = (inputs.tensors[name] for name in "qkv")
    out = adapter("flash_attention", "cudnn")(q, k, v, causal=True)
    ref, _ = attention_forward(q, k, v, causal=True, precision=REFERENCE)
    seeing = bottom_right_mask(case.seq_q, case.seq_k, "cuda").any(dim=-1)
    error = (out.double() - ref.double()).abs()
    mean_v = v.double().mean(dim=2, keepdim=True).expand_as(ref)
    print("1. sdpa:cudnn", case.id)
    print(f"   rows that see no key: {int((~seeing).sum())} of {case.seq_q}")
    print(f"   max error, rows with keys:    {error[:, :, seeing].max().item():.3e}")
    print(f"   max error, rows without keys: {error[:, :, ~seeing].max().item():.3e}")
    print(f"   max |out| on rows without keys: {out[:, :, ~seeing].abs().max().item():.3e}")
    print(f"   max |out - mean(V)| there:     {(out.double() - mean_v)[:, :, ~seeing].abs().max().item():.3e}")


def flash_gqa_dk():
    case, inputs = inputs_of("flash_attention.bwd[fp16,d128,causal,B1,H8,Hkv2,Sq509,Sk1024,seed0]")
    q, k, v = (inputs.tensors[name] for name in "qkv")
    flash = adapter("flash_attention", "flash")
    (dk_gqa,) = torch.autograd.grad(flash(q, k, v, causal=True), [k], inputs.do)
    group = case.heads // case.kv_heads
    k_rep, v_rep = (t.detach().repeat_interleave(group, dim=1).requires_grad_() for t in (k, v))
    (dk_heads,) = torch.autograd.grad(flash(q, k_rep, v_rep, causal=True), [k_rep], inputs.do)
    per_group = dk_heads.unflatten(1, (case.kv_heads, group))
    fa2_style = per_group.float().sum(dim=2).half()  # per-head dK in fp16, summed in fp32, rounded
    with torch.no_grad():
        out, lse = attention_forward(q, k, v, causal=True, precision=REFERENCE)
        _, dk_ref, _ = attention_backward(q, k, v, out, inputs.do, lse, causal=True, precision=REFERENCE)
    print("2. sdpa:flash", case.id)
    print(f"   max |dK(gqa) - fp16(sum of fp16 per-head dK)|: "
          f"{(dk_gqa.float() - fa2_style.float()).abs().max().item():.3e}")
    print(f"   max error vs reference: dK(gqa) {(dk_gqa.double() - dk_ref.double()).abs().max().item():.3e}")
    print(f"   max error of the per-head dK already rounded (before the group sum): "
          f"{(per_group.double().sum(dim=2) - dk_ref.double()).abs().max().item():.3e}")


def flash_inf_row():
    case, inputs = inputs_of("flash_attention.bwd[fp16,d64,noncausal,B1,H8,Hkv2,Sq509,Sk1024,inf,seed0]")
    q, k, v = (inputs.tensors[name] for name in "qkv")
    row = case.seq_q // 2
    k_rep, v_rep = (t.detach().repeat_interleave(case.heads // case.kv_heads, dim=1) for t in (k, v))
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q.detach(), k_rep, v_rep)[:2]
    print("3. sdpa:flash", case.id)
    print(f"   stored log-normalizer of the poisoned row: {lse[0, 0, row].item()}, its out finite: "
          f"{bool(torch.isfinite(out[0, 0, row]).all())}")
    (dv,) = torch.autograd.grad(adapter("flash_attention", "flash")(q, k, v), [v], inputs.do)
    finite = torch.isfinite(dv[0, 0]).all(dim=-1)
    k_sign = k[0, 0, :, 0] > 0
    print(f"   dV rows (keys) of kv head 0 finite: {int(finite.sum())} of {case.seq_k}; of those, keys whose "
          f"score with the +Inf query is -Inf (k[..., 0] < 0): {int((finite & ~k_sign).sum())}")


if __name__ == "__main__":
    backends.activate(None)
    torch.manual_seed(0)
    for question in (cudnn_empty_rows, flash_gqa_dk, flash_inf_row):
        try:
            question()
        except Exception as exc:  # one question's failure must not hide the others' answers
            print(f"{question.__name__}: {type(exc).__name__}: {exc}")
