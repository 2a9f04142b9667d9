package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent/providers"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/skills"
	"github.com/heraldhq/herald/store"
)

// doctorTimeout bounds each check against a real endpoint.
const doctorTimeout = 20 * time.Second

// Doctor checks what `herald doctor` checks besides the config itself: the
// state dir, each provider (its model list against the configured models)
// and each enabled channel module against its real endpoint (its Check,
// else its adapter's Checker). It starts nothing and changes nothing.
func Doctor(ctx context.Context, cfg *config.Config, stateDir string) []channels.Check {
	out := []channels.Check{checkState(ctx, cfg, stateDir), checkDescriptors(cfg)}
	ids := make([]string, 0, len(cfg.Models.Providers))
	for id := range cfg.Models.Providers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		out = append(out, checkProvider(ctx, id, cfg.Models.Providers[id]))
	}
	out = append(out, checkSkills(cfg, stateDir)...)
	g := &Gateway{log: zap.NewNop(), metrics: newMetrics()}
	g.conf.Store(cfg)
	for _, m := range channels.Modules() {
		name := m.Name
		if m.Check != nil {
			if opts := cfg.Channels.Options(string(name)); opts.Common().Enabled {
				cctx, cancel := context.WithTimeout(ctx, doctorTimeout)
				out = append(out, m.Check(cctx, channels.Deps{Options: opts, Logger: zap.NewNop(), State: &channels.MemoryKV{}})...)
				cancel()
			}
			continue
		}
		ch, err := g.buildChannel(name, cfg)
		if err != nil {
			out = append(out, channels.Check{Name: string(name), Status: channels.CheckFail, Detail: err.Error(), Fix: "fix channels." + string(name)})
			continue
		}
		if c, ok := ch.(channels.Checker); ok {
			cctx, cancel := context.WithTimeout(ctx, doctorTimeout)
			out = append(out, c.Check(cctx)...)
			cancel()
		}
	}
	return out
}

// minDescriptors is the open-file limit below which doctor warns: a few
// hundred runs in flight, each with a provider connection, and the store
// need more.
const minDescriptors = 4096

// checkDescriptors reports the open-file limit (RLIMIT_NOFILE) and what
// the providers' maxConnections take of it: running out shows as EMFILE
// ("too many open files") in the log.
func checkDescriptors(cfg *config.Config) channels.Check {
	c := channels.Check{Name: "file descriptors", Status: channels.CheckOK}
	open, limit := store.Descriptors()
	if limit == 0 {
		c.Status, c.Detail = channels.CheckWarn, "the open-file limit (RLIMIT_NOFILE) cannot be read here"
		return c
	}
	conns := 0
	for _, p := range cfg.Models.Providers {
		conns += cmp.Or(p.MaxConnections, providers.DefaultMaxConnections())
	}
	c.Detail = fmt.Sprintf("limit %d (RLIMIT_NOFILE), %d open now; providers may hold up to %d connections (maxConnections)", limit, open, conns)
	switch {
	case limit < minDescriptors:
		c.Status = channels.CheckWarn
		c.Fix = fmt.Sprintf("raise the open-file limit to at least %d (ulimit -n, or LimitNOFILE= in the systemd unit): past it the log says EMFILE (too many open files)", minDescriptors)
	case uint64(conns) > limit*3/4:
		c.Status = channels.CheckWarn
		c.Fix = "lower models.providers.<id>.maxConnections or raise the open-file limit: the providers' connections alone could use most of it"
	}
	return c
}

func checkState(ctx context.Context, cfg *config.Config, stateDir string) channels.Check {
	c := channels.Check{Name: "state dir"}
	pg := cfg.State.Driver == store.DriverPostgres
	if pg {
		c.Name = "state database"
	}
	db, err := store.OpenStore(ctx, cfg.State.Driver, cfg.State.URL.Value(), stateDir)
	if err != nil {
		c.Status, c.Detail = channels.CheckFail, err.Error()
		c.Fix = "give the user running herald write access to " + stateDir + " (or pass --state-dir), or restore herald.db from a backup"
		if errors.Is(err, store.ErrTooManyFiles) {
			c.Fix = "raise the open-file limit (ulimit -n, or LimitNOFILE= in the systemd unit)"
		} else if pg {
			c.Fix = "check state.url (host, port, user, password, database) and that PostgreSQL accepts connections from this host"
		}
		return c
	}
	defer db.Close()
	where := stateDir + " writable"
	if pg {
		where = "PostgreSQL " + db.Path() + " reachable, schema up to date"
	}
	pending, delivered, failed, err := db.OutboxStats(ctx)
	if err != nil {
		c.Status, c.Detail = channels.CheckFail, err.Error()
		return c
	}
	c.Status = channels.CheckOK
	c.Detail = fmt.Sprintf("%s; outbox %d pending, %d delivered, %d failed", where, pending, delivered, failed)
	if failed > 0 {
		c.Status, c.Fix = channels.CheckWarn, "`herald outbox list` shows the failed messages and their last error"
	}
	return c
}

func checkProvider(ctx context.Context, id string, p config.Provider) channels.Check {
	keys := p.Keys()
	if len(keys) < 2 {
		return checkProviderKey(ctx, id, p, "")
	}
	// Several keys (SPEC §20): each is checked alone and named by its
	// position, never by its value.
	c := channels.Check{Name: "provider " + id, Status: channels.CheckOK}
	var bad []string
	for i, k := range keys {
		one := p
		one.APIKey, one.APIKeys = k, nil
		kc := checkProviderKey(ctx, id, one, fmt.Sprintf("key %d of %d", i+1, len(keys)))
		if kc.Status == channels.CheckOK {
			continue
		}
		bad = append(bad, fmt.Sprintf("key %d of %d: %s", i+1, len(keys), kc.Detail))
		if kc.Status == channels.CheckFail || c.Status == channels.CheckOK {
			c.Status, c.Fix = kc.Status, kc.Fix
		}
	}
	if len(bad) == 0 {
		c.Detail = fmt.Sprintf("%d configured models available with each of %d keys", len(p.Models), len(keys))
		return c
	}
	c.Detail = strings.Join(bad, "; ")
	if len(bad) < len(keys) && c.Status == channels.CheckFail {
		// The others carry the calls; the failing ones are set aside.
		c.Status = channels.CheckWarn
	}
	return c
}

// checkProviderKey checks a provider with one key; which names the key
// ("key 2 of 3") in the fix, "" with a single key.
func checkProviderKey(ctx context.Context, id string, p config.Provider, which string) channels.Check {
	c := channels.Check{Name: "provider " + id}
	prov, err := providers.New(id, p, providers.Options{})
	if err != nil {
		c.Status, c.Detail, c.Fix = channels.CheckFail, err.Error(), "fix models.providers."+id
		return c
	}
	lister, ok := prov.(providers.ModelLister)
	if !ok {
		c.Status, c.Detail = channels.CheckWarn, "cannot list models of api "+p.API
		return c
	}
	lctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	listed, err := lister.ListModels(lctx)
	if err != nil {
		c.Status, c.Detail = channels.CheckFail, err.Error()
		switch status := providers.StatusOf(err); {
		case status == 0 && channels.Unreachable(err):
			c.Fix = fmt.Sprintf("cannot reach the API: check the network, a proxy, or models.providers.%s.baseUrl", id)
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			c.Fix = fmt.Sprintf("the API key was refused: check models.providers.%s.apiKey", id)
			if which != "" {
				c.Fix = fmt.Sprintf("the API key was refused: check %s in models.providers.%s.apiKeys", which, id)
			}
		case status == http.StatusNotFound && p.API == providers.APIOpenAICompatible:
			c.Status, c.Fix = channels.CheckWarn, "this server does not list models (GET /models); model calls may still work"
		default:
			c.Fix = fmt.Sprintf("the API refused the model list: check models.providers.%s (baseUrl, apiKey)", id)
		}
		return c
	}
	var missing []string
	for _, m := range p.Models {
		if !slices.Contains(listed, m.ID) {
			missing = append(missing, m.ID)
		}
	}
	if len(missing) > 0 {
		c.Status = channels.CheckFail
		c.Detail = fmt.Sprintf("the endpoint does not list %s (it lists %d models)", strings.Join(missing, ", "), len(listed))
		c.Fix = fmt.Sprintf("fix models.providers.%s.models[].id", id)
		return c
	}
	c.Status = channels.CheckOK
	c.Detail = fmt.Sprintf("%d configured models available", len(p.Models))
	return c
}

// checkSkills names every malformed SKILL.md (skipped by the agents) with
// its path, or says how many skills the agents have (SPEC §28).
func checkSkills(cfg *config.Config, stateDir string) []channels.Check {
	r := SkillsReport(cfg, stateDir)
	if len(r.Problems) == 0 {
		n := 0
		for _, a := range r.Agents {
			n += len(a.Skills)
		}
		return []channels.Check{{Name: "skills", Status: channels.CheckOK, Detail: fmt.Sprintf("%d skills, none malformed", n)}}
	}
	out := make([]channels.Check, 0, len(r.Problems))
	for _, p := range r.Problems {
		out = append(out, channels.Check{Name: "skills", Status: channels.CheckWarn, Detail: p.Path + ": " + p.Error + " (skipped)",
			Fix: "fix the file: it starts with a line ---, then name: (lower-case, digits, hyphens) and description:, then ---"})
	}
	return out
}

// SkillsReport is every agent's skills under cfg and the malformed
// SKILL.md files (herald skills list, doctor).
func SkillsReport(cfg *config.Config, stateDir string) skills.Report {
	ids := make([]string, 0, len(cfg.Agents.List))
	for _, a := range cfg.Agents.List {
		ids = append(ids, a.ID)
	}
	return skills.NewReport(ids, func(id string) []string {
		return skills.Dirs(cfg.AgentWorkspace(id, stateDir), cfg.Skills.Paths, stateDir)
	})
}
