# Herald — the two commands a newcomer needs are `make run` and `make test`.
GO ?= go
STATE_DIR ?= $(HOME)/.herald
# goolm: mautrix's pure-Go Olm for Matrix end-to-end encryption (no cgo, no
# libolm). Every build and test passes it; without it Matrix encryption is off.
TAGS ?= goolm
# The gateway is built static (CGO_ENABLED=0), as releases and the Docker image
# are: nothing in it needs cgo (pure-Go SQLite, Go's DNS resolver and os/user,
# libcap's psx through syscall.AllThreadsSyscall), and without ld.so and
# runtime/cgo each start takes less CPU: `herald version` 5.8 -> 5.0 ms on a
# quiet machine, CPU until /readyz 16.5 -> 15.7 ms (medians of 40 interleaved
# starts under load; docs/performance.md). Only the race detector needs cgo:
# `make test` keeps it for the tests.
BUILD = CGO_ENABLED=0 $(GO) build -tags $(TAGS)

.PHONY: help run build test test-go fuzz bench load load-sessions chaos lint release

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' \
		'{ n[NR] = $$1; d[NR] = $$2; if (length($$1) > w) w = length($$1) } \
		END { f = sprintf("  make %%-%ds  %%s\n", w); for (i = 1; i <= NR; i++) printf f, n[i], d[i] }'

# run and build install a copy of the linker's output: Linux 6.x caches a file
# the Go linker has just written in 2 MB folios, and an idle gateway cannot give
# back the start's pages of such a binary (idle RSS 31 -> 10.6 MiB; see
# docs/performance.md, "Where issue 42 stands").
INSTALL_LINKED = install -m 0755 bin/herald.link bin/herald && rm -f bin/herald.link

run: ## run the gateway: ~/.herald/herald.json5 when it exists (herald init writes it), else the built-in default (web chat on 127.0.0.1:8790, demo model unless an API key is set)
	$(BUILD) -o bin/herald.link ./cmd/herald
	$(INSTALL_LINKED)
	bin/herald gateway --log-format console

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
PLATFORMS ?= linux/amd64 linux/arm64 darwin/arm64
release: ## static binaries (no cgo, goolm tag, -trimpath, VERSION stamped) for PLATFORMS in dist/, with dist/SHA256SUMS
	bash scripts/release.sh $(VERSION) $(PLATFORMS)

build: ## build bin/herald (static, no cgo)
	$(BUILD) -trimpath -ldflags="-s -w" -o bin/herald.link ./cmd/herald
	$(INSTALL_LINKED)

test: ## install what the tests need (Chromium, Dendrite, PostgreSQL; apt-get, so root or sudo), then run every test (fuzz seeds included)
	bash scripts/test.sh

test-go: ## only the Go tests, with what is already installed
	$(GO) test -tags $(TAGS) ./...

FUZZTIME ?= 30s
fuzz: ## fuzz the chat command parser and handler and the config parser, FUZZTIME each (rebuilds with coverage instrumentation)
	$(GO) test -tags $(TAGS) -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./gateway/command
	$(GO) test -tags $(TAGS) -run='^$$' -fuzz='^FuzzHandle$$' -fuzztime=$(FUZZTIME) ./gateway/command
	$(GO) test -tags $(TAGS) -run='^$$' -fuzz='^FuzzParseAgreesWithJSON5$$' -fuzztime=$(FUZZTIME) ./config

bench: ## benchmarks (store, lanes, sub-agent runs, MCP tool calls, model calls in flight)
	$(GO) test -tags $(TAGS) -run='^$$' -bench=. -benchmem ./store ./subagent ./lane ./agent/mcptools ./agent/providers

S ?= 100
M ?= 100
LATENCY ?= 5s
load: ## load a real gateway through the web API: S conversations × M sub-agents, fake model with LATENCY per call (docs/performance.md)
	$(GO) run -tags $(TAGS) ./cmd/herald-load -s $(S) -m $(M) -latency $(LATENCY) $(LOADFLAGS)

N ?= 10000
load-sessions: ## bounded memory: 2 waves of N conversations × 3 turns, RSS and open files before and after idle sessions leave memory (docs/performance.md)
	$(GO) run -tags $(TAGS) ./cmd/herald-load -sessions $(N) -turns 3 -waves 2 -timeout 30m $(LOADFLAGS)

K ?= 20
CHAOS_LATENCY ?= 1s
chaos: ## kill a real gateway K times under load (web, Telegram and Slack; fake model with CHAOS_LATENCY) and check nothing acknowledged is lost, repeated or reordered (docs/reliability.md)
	$(GO) test -tags $(TAGS) -count=1 -timeout 90m -run TestChaos -v ./devtools/chaos -args -kills=$(K) -latency=$(CHAOS_LATENCY)

lint: ## staticcheck (pinned) and go vet
	$(GO) vet -tags $(TAGS) ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.6.1 -tags $(TAGS) ./...
