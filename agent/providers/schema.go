package providers

import (
	"encoding/json"
	"sync"
)

// maxSchemas bounds the parsed-schema cache; past it schemas are parsed on
// every call (a registry that keeps changing its tools, e.g. MCP servers
// reconnecting with new schemas).
const maxSchemas = 1024

// schemas caches tool schemas parsed from JSON, keyed by their text: every
// model call sends every tool, and parsing them each time was ~2 % of the
// gateway's CPU with 10,000 sub-agents in flight (docs/performance.md).
var schemas = struct {
	sync.Mutex
	m map[string]map[string]any
}{m: make(map[string]map[string]any)}

// parseSchema returns raw parsed as a JSON object, nil when it is empty or
// not an object. The map is shared: callers must not change it.
func parseSchema(raw json.RawMessage) map[string]any {
	if len(raw) == 0 {
		return nil
	}
	schemas.Lock()
	m, ok := schemas.m[string(raw)]
	schemas.Unlock()
	if ok {
		return m
	}
	if json.Unmarshal(raw, &m) != nil {
		m = nil
	}
	schemas.Lock()
	if len(schemas.m) < maxSchemas {
		schemas.m[string(raw)] = m
	}
	schemas.Unlock()
	return m
}
