package telemetry

import "go.opentelemetry.io/otel/attribute"

// Herald's span attributes. None holds message text; those marked content
// are set only with recordContent.
const (
	AttrChannel     = attribute.Key("herald.channel")      // slack, telegram, matrix, web, …
	AttrChatType    = attribute.Key("herald.chat.type")    // dm | group
	AttrSessionKey  = attribute.Key("herald.session.key")  // agent:<id>:…
	AttrAgentID     = attribute.Key("herald.agent.id")     //
	AttrIntakeID    = attribute.Key("herald.intake.id")    // the stored inbound message
	AttrRunID       = attribute.Key("herald.run.id")       // a sub-agent run
	AttrRunDepth    = attribute.Key("herald.run.depth")    //
	AttrRunOutcome  = attribute.Key("herald.run.outcome")  // success, error, timeout, stopped, unknown
	AttrOutboxID    = attribute.Key("herald.outbox.id")    // the outbox row delivered
	AttrKind        = attribute.Key("herald.message.kind") // assistant (a reply), announce, system
	AttrChars       = attribute.Key("herald.message.chars")
	AttrDestination = attribute.Key("herald.destination") // the chat (and thread) delivered to
	AttrPart        = attribute.Key("herald.part")        // 1-based
	AttrParts       = attribute.Key("herald.parts")
	AttrAttempt     = attribute.Key("herald.attempt")
	AttrPlatformID  = attribute.Key("herald.platform.message_id")
	AttrResumed     = attribute.Key("herald.resumed")    // continues work cut by a restart
	AttrIterations  = attribute.Key("herald.iterations") // model calls of a turn
	AttrReplica     = attribute.Key("herald.replica")
	AttrRedelivered = attribute.Key("herald.redelivered") // the platform sent a stored message again

	// Content (recordContent only).
	AttrText       = attribute.Key("herald.message.text")
	AttrTask       = attribute.Key("herald.run.task")
	AttrToolArgs   = attribute.Key("gen_ai.tool.call.arguments")
	AttrToolResult = attribute.Key("gen_ai.tool.call.result")
	AttrInput      = attribute.Key("gen_ai.input.messages")
	AttrOutput     = attribute.Key("gen_ai.output.messages")

	// AttrGenAISystem is the older name of gen_ai.provider.name, kept for
	// backends that read it.
	AttrGenAISystem = attribute.Key("gen_ai.system")
)

// GenAI semantic conventions (the gen_ai.* keys; OpenTelemetry's semconv
// packages from v1.42 no longer carry them).
const (
	GenAIOperation     = attribute.Key("gen_ai.operation.name") // chat | execute_tool
	GenAIProvider      = attribute.Key("gen_ai.provider.name")  // anthropic | openai | …
	GenAIRequestModel  = attribute.Key("gen_ai.request.model")
	GenAIMaxTokens     = attribute.Key("gen_ai.request.max_tokens")
	GenAIResponseModel = attribute.Key("gen_ai.response.model")
	GenAIFinishReasons = attribute.Key("gen_ai.response.finish_reasons")
	GenAIInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	GenAIOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	GenAICacheRead     = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	GenAICacheWrite    = attribute.Key("gen_ai.usage.cache_creation.input_tokens")
	GenAIToolName      = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID    = attribute.Key("gen_ai.tool.call.id")
	GenAIToolType      = attribute.Key("gen_ai.tool.type")
	ErrorType          = attribute.Key("error.type")
)

// AttrOutcome is how a turn ended: done, failed, timeout, aborted, or cut
// (by a shutdown or a crash: the turn stays owed and continues).
const AttrOutcome = attribute.Key("herald.turn.outcome")
