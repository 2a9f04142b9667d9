package subagent

import "slices"

// armedGroups is the groups whose groupTimeoutSeconds timer the manager
// holds, sorted, and how many deadlines it keeps for them.
func (m *Manager) armedGroups() ([]string, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var groups []string
	for g := range m.groupTimers {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	return groups, len(m.groupDeadline)
}
