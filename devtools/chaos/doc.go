// Package chaos holds the chaos test (chaos_test.go): a real gateway
// process under load, killed with SIGKILL at random moments and restarted,
// then checked for lost, repeated and reordered answers and announces,
// broken transcripts and database integrity. `make test` runs a bounded
// version; `make chaos K=100` a long one. docs/reliability.md has figures.
package chaos
