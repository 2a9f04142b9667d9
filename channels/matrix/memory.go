package matrix

// recent is a bounded string map that forgets its oldest keys first. It keeps
// the adapter's memory of threads and its own events from growing without
// limit on a long-running bot. Not safe for concurrent use: callers hold the
// adapter's mutex.
type recent struct {
	max   int
	vals  map[string]string
	order []string // insertion order of keys, oldest first
}

func newRecent(max int) *recent {
	return &recent{max: max, vals: make(map[string]string, max)}
}

// put sets key to val, evicting the oldest key when full.
func (r *recent) put(key, val string) {
	if _, ok := r.vals[key]; !ok {
		if len(r.order) >= r.max {
			oldest := r.order[0]
			r.order = r.order[1:]
			delete(r.vals, oldest)
		}
		r.order = append(r.order, key)
	}
	r.vals[key] = val
}

func (r *recent) get(key string) (string, bool) {
	v, ok := r.vals[key]
	return v, ok
}

func (r *recent) has(key string) bool {
	_, ok := r.vals[key]
	return ok
}

// del forgets key.
func (r *recent) del(key string) {
	if _, ok := r.vals[key]; !ok {
		return
	}
	delete(r.vals, key)
	for i, k := range r.order {
		if k == key {
			r.order = append(r.order[:i], r.order[i+1:]...)
			break
		}
	}
}

func (r *recent) len() int { return len(r.vals) }
