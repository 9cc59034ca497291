#!/usr/bin/env bash
# Session 10, call 2: the softcap's tanh in fewer FP32 instructions (working tree: exp2 of one FMA giving 2e,
# -(1 + e) formed once, the sign by a bitwise or) against 3d6e362 (devrun/base; kernels as 0caa000):
# the variants benchmark's softcap cells, base (no Flex) then head (with Flex); the whole standard tier at
# the working tree; its 46 softcap cases over 16 seeds; the three softcap mutants.
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $OUT/gpu.txt 2>&1
(cd devrun/base && PYTHONPATH=. timeout 150 python benchmarks/variants_benchmark.py --variants softcap --dtypes fp16,bf16 --flex-seq-lens none --out $OUT/softcap-base > $OUT/softcap-base.log 2>&1); echo "base rc=$?"
timeout 200 python benchmarks/variants_benchmark.py --variants softcap --dtypes fp16,bf16 --out $OUT/softcap-head > $OUT/softcap-head.log 2>&1; echo "head rc=$?"
cp $OUT/softcap-base.log $OUT/softcap-base/run.log; cp $OUT/softcap-head.log $OUT/softcap-head/run.log
grep -A4 "## Softcap" -m1 $OUT/softcap-head/benchmark.md >/dev/null
for d in base head; do echo "== $d"; sed -n '/^## Softcap/,/^## /p' $OUT/softcap-$d/benchmark.md | grep "^| [fb]"; done
(cd $OUT && tar czf call2-bench.tgz softcap-base softcap-head gpu.txt && rm -rf softcap-base softcap-head)
mkdir -p $OUT/standard; timeout 200 python -m conformance run --tier standard --out $OUT/standard > $OUT/standard/run.log 2>&1; echo "standard rc=$?"
tail -1 $OUT/standard/run.log
(cd $OUT && tar czf call2-standard.tgz standard && rm -rf standard)
python -m conformance list --tier standard | grep softcap > $OUT/softcap-cases.txt
args=(); while read -r c; do args+=("--case=$c"); done < $OUT/softcap-cases.txt
mkdir -p $OUT/softcap-seeds; timeout 150 python -m conformance run --seeds 16 "${args[@]}" --out $OUT/softcap-seeds > $OUT/softcap-seeds/run.log 2>&1; echo "seeds rc=$?"
tail -1 $OUT/softcap-seeds/run.log
(cd $OUT && tar czf call2-seeds.tgz softcap-seeds softcap-cases.txt && rm -rf softcap-seeds)
mkdir -p $OUT/mutants-softcap; timeout 150 python -m mutants --tier standard --mutant softcap_backward_no_slope --mutant softcap_hardware_tanh --mutant softcap_16bit_tanh --max-kills 1 -j 3 --out $OUT/mutants-softcap > $OUT/mutants-softcap/run.log 2>&1; echo "mutants rc=$?"
tail -3 $OUT/mutants-softcap/run.log
(cd $OUT && tar czf call2-mutants.tgz mutants-softcap && rm -rf mutants-softcap)
