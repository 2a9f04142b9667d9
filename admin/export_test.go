package admin

import "time"

// SetPoll sets how often c's event streams look for other replicas'
// changes (poll: 5 s).
func SetPoll(c *Console, d time.Duration) { c.poll = d }
