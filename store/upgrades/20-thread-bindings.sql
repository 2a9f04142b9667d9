-- v20: thread bindings
-- a chat thread bound to a sub-agent's session (SPEC §24): messages in
-- the thread go to the child session until the binding ends
-- (expires_at, threadIdleMinutes after the last message) or /unfocus.
CREATE TABLE thread_bindings (
	channel     TEXT NOT NULL,
	account     TEXT NOT NULL DEFAULT '',
	chat_id     TEXT NOT NULL,
	thread_id   TEXT NOT NULL,
	origin      TEXT NOT NULL DEFAULT '{}',
	child_key   TEXT NOT NULL,
	run_id      TEXT NOT NULL,
	agent_id    TEXT NOT NULL DEFAULT '',
	created_by  TEXT NOT NULL DEFAULT '',
	created_at  BIGINT NOT NULL,
	last_at     BIGINT NOT NULL,
	expires_at  BIGINT NOT NULL,
	PRIMARY KEY (channel, account, chat_id, thread_id)
);
CREATE INDEX thread_bindings_child ON thread_bindings (child_key);
