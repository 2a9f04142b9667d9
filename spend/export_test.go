package spend

// Held is how many sums the ledger keeps in memory (for tests).
func (l *Ledger) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sums)
}
