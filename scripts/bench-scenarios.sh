# scripts/bench-scenarios.sh: the gustload flags of the message scenarios of issue 4, sourced by
# scripts/bench and scripts/bench-syscalls so that both run exactly the same load. Not a command.

# message_scenario_flags SCENARIO prints gustload's flags for a, b, c, c5, c20, l5, l20, d, dt or f (without -T).
message_scenario_flags() {
	case "$1" in
	a) echo "-c 1 -w 256 -p 300" ;;         # ws-tool's headline
	b) echo "-c 200 -w 16 -p 2396" ;;       # gws's tcpkali case
	c) echo "-c 1000 -w 1 -p 1024" ;;       # request/response
	c5) echo "-c 5000 -w 1 -p 1024" ;;      # the same at 5,000 connections (published Go benchmarks)
	c20) echo "-c 19500 -w 1 -p 1024" ;;    # and at ~20,000 (one process may hold 20,000 descriptors)
	l5) echo "-c 5000 -w 1 -p 1024 -r 8" ;;  # c5 at a fixed 40,000 msg/s, about half what saturates this machine: latency
	l20) echo "-c 19500 -w 1 -p 1024 -r 2" ;; # c20 at a fixed 39,000 msg/s
	d) echo "-c 1 -w 4 -p 1048576 -binary" ;; # 1 MiB messages
	dt) echo "-c 1 -w 4 -p 1048576" ;;         # d as text: every server validates 1 MiB of UTF-8 per message
	f) echo "-c 4 -w 150 -p 1024" ;;        # sockety-style QPS
	*) return 1 ;;
	esac
}
