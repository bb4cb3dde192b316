# gust: the front door. Each target is a few lines; anything longer lives in scripts/.
#
#   make test         go vet, staticcheck (installed into .tools/bin if missing), go test -race
#                     with coverage (root and nested modules), then the
#                     Autobahn TestSuite: every section (1-13, compression included, ~11 min) on
#                     the Server path and sections 1-10 (~30 s) on the Upgrader path (installs
#                     wstest itself), sections 1-10 on both paths in netpoll mode and over
#                     wss:// on the Server path in netpoll mode (TLS on the event loops, ~20 s),
#                     the compression cases 12.1 and 13.3 with every message through a primed
#                     compressor (-prime, ~80 s), and gust's client against wstest's fuzzing
#                     server, sections 1-10
#   make autobahn     the whole Autobahn TestSuite (1-13, compression included) on both paths,
#                     in goroutine and netpoll mode, over wss:// on the Server path in netpoll mode,
#                     and for the client (make autobahn-client: the client alone)
#   make fuzz         every Fuzz* target for $(FUZZTIME) each (default 20s)
#   make cover        tests with coverage; writes coverage.out and coverage.html
#   make bench        benchmark harness (scripts/bench), bench-quick a short run of it
#
# AUTOBAHN_FLAGS adds flags to scripts/autobahn, e.g. make autobahn AUTOBAHN_FLAGS='-server upgrader'.

SHELL := /usr/bin/env bash
AUTOBAHN_FLAGS ?=
AUTOBAHN_QUICK := 1.*,2.*,3.*,4.*,5.*,6.*,7.*,9.*,10.*
AUTOBAHN_ALL := 1.*,2.*,3.*,4.*,5.*,6.*,7.*,9.*,10.*,12.*,13.*
# Context takeover with the default window and with 256-byte windows (13.3), every compressed
# message through a primed compressor (scripts/autobahn -prime).
AUTOBAHN_PRIME := 12.1.*,13.3.*
export FUZZTIME ?= 20s

.PHONY: test autobahn autobahn-client fuzz bench bench-quick cover install-wstest install-interop

test: install-wstest install-interop
	scripts/gotest
	scripts/autobahn -server upgrader -cases '$(AUTOBAHN_QUICK)' $(AUTOBAHN_FLAGS)
	scripts/autobahn -server server -cases '$(AUTOBAHN_ALL)' $(AUTOBAHN_FLAGS)
	scripts/autobahn -server both -netpoll -cases '$(AUTOBAHN_QUICK)' $(AUTOBAHN_FLAGS)
	scripts/autobahn -server server -netpoll -tls -cases '$(AUTOBAHN_QUICK)' $(AUTOBAHN_FLAGS)
	scripts/autobahn -server server -prime -cases '$(AUTOBAHN_PRIME)' $(AUTOBAHN_FLAGS)
	scripts/autobahn-client -cases '$(AUTOBAHN_QUICK)'

autobahn: install-wstest
	scripts/autobahn -server both -cases '$(AUTOBAHN_ALL)' $(AUTOBAHN_FLAGS)
	scripts/autobahn -server both -netpoll -cases '$(AUTOBAHN_ALL)' $(AUTOBAHN_FLAGS)
	scripts/autobahn -server server -netpoll -tls -cases '$(AUTOBAHN_ALL)' $(AUTOBAHN_FLAGS)
	scripts/autobahn-client -cases '$(AUTOBAHN_ALL)'

# The client alone against wstest's fuzzing server, every section.
autobahn-client: install-wstest
	scripts/autobahn-client -cases '$(AUTOBAHN_ALL)'

install-wstest:
	scripts/install-wstest >/dev/null

# Python websockets, Node ws, headless Chromium and Firefox, nginx, HAProxy and Caddy for the
# interop tests.
install-interop:
	scripts/install-interop >/dev/null

fuzz:
	scripts/fuzz

cover:
	go test -count=1 -coverprofile=coverage.out ./...
	go tool cover -func=coverage.out | tail -n 1
	go tool cover -html=coverage.out -o coverage.html
	@echo "coverage.html written"

bench:
	scripts/bench

bench-quick:
	scripts/bench-quick
