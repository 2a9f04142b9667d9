// Package schedule owns schedules (SPEC §19): parsing cron, every and at
// times in their IANA timezone, the catch-up and overlap decisions of each
// due time, the scheduler loop that fires due schedules through the store
// (the due time claimed in the transaction that records its run) and hands
// the runs to the sub-agent lane, the /schedule chat grammar and the
// schedule tool.
//
// It must not import gateway or any channels/<name> package: a firing is a
// sub-agent run, announced through the store's outbox.
package schedule
