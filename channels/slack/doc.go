// Package slack is Herald's Slack channel: it receives messages over Socket
// Mode (app token) or the Events API over HTTP (signing secret verified),
// decodes app mentions, DMs, thread replies and slash commands into
// channels.Inbound with a thread-aware Origin, applies the channel's Access
// rules, and posts replies with chat.postMessage (split at the Slack limit,
// rate limits reported as *channels.RetryAfterError).
//
// It must not import config, gateway, agent, subagent or store: it takes its
// own Options, pushes Inbound events into the gateway's Sink and never calls
// an agent itself.
package slack
