#!/bin/sh
# nscc_cost.sh EXAMPLE: instructions per NSCC per-ACK update, counted with
# callgrind, and the per-flow state size. EXAMPLE is the built
# `nscc_per_ack` example (provider/examples/nscc_per_ack.rs). Two runs of
# N and 2N updates: the difference over N drops start-up and exit.
set -eu
ex=${1:?usage: nscc_cost.sh path/to/nscc_per_ack}
n=${NSCC_UPDATES:-100000}
count() {
	valgrind --tool=callgrind --callgrind-out-file=/dev/null "$ex" "$1" 2>&1 |
		sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}
a=$(count "$n")
b=$(count $((2 * n)))
[ -n "$a" ] && [ -n "$b" ] || { echo "nscc_cost: callgrind gave no count"; exit 1; }
sizes=$("$ex" 1)
state=$(echo "$sizes" | sed -n 's/.*state_bytes \([0-9]*\).*/\1/p')
ctrs=$(echo "$sizes" | sed -n 's/.*counters_bytes \([0-9]*\).*/\1/p')
derived=$(echo "$sizes" | sed -n 's/.*derived_bytes \([0-9]*\).*/\1/p')
whole=$(echo "$sizes" | sed -n 's/.*controller_bytes \([0-9]*\).*/\1/p')
echo "NSCC per-ACK: $(( (b - a) / n )) instructions (callgrind, mean of $n updates, feedback construction included)"
echo "NSCC per-flow state: $state bytes (algorithm state; $whole with the $derived bytes of parameters derived from the base RTT, the $ctrs bytes of diagnostic counters and the config pointer; the paper's is 19)"
