package agent

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"

	"github.com/heraldhq/herald/config"
)

// Model is one usable model: a provider and a model id, with its pricing.
type Model struct {
	Ref        string // provider/model
	ProviderID string
	ID         string
	API        string // anthropic|openai|openai-compatible|demo
	Provider   Provider
	MaxTokens  int
	Cost       *config.Cost
	// ContextWindow is the model's context in tokens: the configured
	// contextWindow, else KnownContextWindow; 0 = unknown (history is
	// then sent whole and only a context-length error compacts it).
	ContextWindow int
	// Images: the model takes image content (models[].input, else the
	// known vision families).
	Images bool
}

// Catalog resolves "provider/model" references to models. A config reload
// replaces its models (Replace) while turns look them up.
type Catalog struct {
	mu     sync.RWMutex
	models map[string]*Model // guarded by mu
	health *Health           // guarded by mu; kept by Replace
}

// Health is the catalog's record of failing models (cooldowns).
func (c *Catalog) Health() *Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.health == nil {
		c.health = NewHealth()
	}
	return c.health
}

// NewCatalog builds a catalog from the configured providers, constructing one
// Provider per provider id with newProvider.
func NewCatalog(cfg *config.Config, newProvider func(id string, p config.Provider) (Provider, error)) (*Catalog, error) {
	c := &Catalog{models: make(map[string]*Model), health: NewHealth()}
	for id, p := range cfg.Models.Providers {
		prov, err := newProvider(id, p)
		if err != nil {
			return nil, fmt.Errorf("provider %s: %w", id, err)
		}
		for _, m := range p.Models {
			ref := id + "/" + m.ID
			c.models[ref] = &Model{Ref: ref, ProviderID: id, ID: m.ID, API: p.API, Provider: prov, MaxTokens: m.MaxTokens, Cost: m.Cost,
				ContextWindow: cmp.Or(m.ContextWindow, KnownContextWindow(m.ID)), Images: m.TakesImages(p.API)}
		}
	}
	return c, nil
}

// Add registers a model (tests and the demo fallback use it).
func (c *Catalog) Add(m *Model) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.models == nil {
		c.models = make(map[string]*Model)
	}
	c.models[m.Ref] = m
}

// Lookup returns the model for a "provider/model" reference.
func (c *Catalog) Lookup(ref string) (*Model, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m, ok := c.models[strings.TrimSpace(ref)]
	return m, ok
}

// Replace makes c resolve what next resolves (a reloaded config's models).
// A turn that already looked up its model keeps using it.
func (c *Catalog) Replace(next *Catalog) {
	next.mu.RLock()
	models := maps.Clone(next.models)
	next.mu.RUnlock()
	c.mu.Lock()
	c.models = models
	c.mu.Unlock()
}

// EstimateCost returns the USD cost of u at the model's pricing, and false
// when the model has no cost configured.
func (m *Model) EstimateCost(u Usage) (float64, bool) {
	if m == nil || m.Cost == nil {
		return 0, false
	}
	c := m.Cost
	usd := (float64(u.Input)*c.Input + float64(u.Output)*c.Output +
		float64(u.CacheRead)*c.CacheRead + float64(u.CacheWrite)*c.CacheWrite) / 1e6
	return math.Round(usd*1e8) / 1e8, true
}
