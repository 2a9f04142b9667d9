// Package telegram is Herald's Telegram channel: it receives messages from
// the Bot API by long polling (getUpdates) or a webhook, decodes them into
// channels.Inbound with forum-topic origins, applies the channel's access
// rules, and sends replies back into the same chat and topic, split at
// Telegram's 4096-character limit and honouring retry_after.
//
// It uses github.com/go-telegram-bot-api/telegram-bot-api/v5 v5.5.1, which
// predates forum topics, so message_thread_id and is_topic_message are read
// from the raw update JSON and sent as extra request parameters.
//
// It must not import config, gateway, agent, subagent or store, and never
// calls an agent: it hands every admitted message to the gateway's Sink.
package telegram
