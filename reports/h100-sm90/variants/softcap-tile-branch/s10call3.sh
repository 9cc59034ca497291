#!/usr/bin/env bash
# Session 10, call 3: the softcap's tanh skipping its exp branch where a whole score tile lies within the
# polynomial's range (a tile-wide max, one branch uniform over the program; working tree) against bcd316b
# (devrun/base): softcap_probe.py on small and large scores, base then head, twice; the variants
# benchmark's softcap cells at the working tree (with Flex); the standard tier; the 46 softcap cases over
# 16 seeds; the three softcap mutants.
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $OUT/gpu.txt 2>&1
mkdir -p $OUT/probe
for round in 1 2; do
  (cd devrun/base && PYTHONPATH=. timeout 90 python ../softcap_probe.py $OUT/probe/probe.jsonl base >> $OUT/probe/probe.log 2>&1); echo "base rc=$?"
  timeout 90 python devrun/softcap_probe.py $OUT/probe/probe.jsonl head >> $OUT/probe/probe.log 2>&1; echo "head rc=$?"
done
cat $OUT/probe/probe.jsonl
(cd $OUT && tar czf call3-probe.tgz probe gpu.txt)
timeout 200 python benchmarks/variants_benchmark.py --variants softcap --dtypes fp16,bf16 --out $OUT/softcap-head > $OUT/softcap-head.log 2>&1; echo "bench rc=$?"
cp $OUT/softcap-head.log $OUT/softcap-head/run.log
sed -n '/^## Softcap/,/^## /p' $OUT/softcap-head/benchmark.md | grep "^| [fb]"
(cd $OUT && tar czf call3-bench.tgz softcap-head && rm -rf softcap-head)
mkdir -p $OUT/standard; timeout 200 python -m conformance run --tier standard --out $OUT/standard > $OUT/standard/run.log 2>&1; echo "standard rc=$?"
tail -1 $OUT/standard/run.log
(cd $OUT && tar czf call3-standard.tgz standard && rm -rf standard)
python -m conformance list --tier standard | grep softcap > $OUT/softcap-cases.txt
args=(); while read -r c; do args+=("--case=$c"); done < $OUT/softcap-cases.txt
mkdir -p $OUT/softcap-seeds; timeout 100 python -m conformance run --seeds 16 "${args[@]}" --out $OUT/softcap-seeds > $OUT/softcap-seeds/run.log 2>&1; echo "seeds rc=$?"
tail -1 $OUT/softcap-seeds/run.log
(cd $OUT && tar czf call3-seeds.tgz softcap-seeds softcap-cases.txt && rm -rf softcap-seeds)
mkdir -p $OUT/mutants-softcap; timeout 120 python -m mutants --tier standard --mutant softcap_backward_no_slope --mutant softcap_hardware_tanh --mutant softcap_16bit_tanh --max-kills 1 -j 3 --out $OUT/mutants-softcap > $OUT/mutants-softcap/run.log 2>&1; echo "mutants rc=$?"
tail -3 $OUT/mutants-softcap/run.log
(cd $OUT && tar czf call3-mutants.tgz mutants-softcap && rm -rf mutants-softcap)
