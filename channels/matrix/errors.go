package matrix

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"maunium.net/go/mautrix"

	"github.com/heraldhq/herald/channels"
)

// Sentinel errors of the Matrix channel.
var (
	// ErrNotStarted is returned by Send before Start succeeded or after Stop.
	ErrNotStarted = errors.New("matrix channel not started")
	// ErrAuth is returned by Start when the homeserver rejects the
	// credentials (a bad access token or password).
	ErrAuth = errors.New("matrix login failed")
)

// defaultRetryAfter is used when a homeserver rate-limits without saying
// for how long.
const defaultRetryAfter = 5 * time.Second

// permanentCodes are Matrix error codes a retry cannot fix.
var permanentCodes = []mautrix.RespError{
	mautrix.MForbidden,
	mautrix.MUnknownToken,
	mautrix.MMissingToken,
	mautrix.MNotFound,
	mautrix.MBadJSON,
	mautrix.MNotJSON,
	mautrix.MTooLarge,
	mautrix.MUserDeactivated,
}

// classifySendError maps a mautrix error to the channels contract:
// M_LIMIT_EXCEEDED (or a bare 429) becomes *channels.RetryAfterError, errors
// that retrying cannot fix wrap channels.ErrPermanent, and everything else
// (5xx, network) stays a plain, transient error. op says what was attempted.
func classifySendError(op string, err error) error {
	var httpErr mautrix.HTTPError
	hasHTTP := errors.As(err, &httpErr)
	status := 0
	if hasHTTP && httpErr.Response != nil {
		status = httpErr.Response.StatusCode
	}
	if errors.Is(err, mautrix.MLimitExceeded) || status == http.StatusTooManyRequests {
		return &channels.RetryAfterError{After: retryAfter(httpErr), Err: fmt.Errorf("%s: %w", op, err)}
	}
	for _, code := range permanentCodes {
		if errors.Is(err, code) {
			return fmt.Errorf("%s: %w: %w", op, channels.ErrPermanent, err)
		}
	}
	if status >= 400 && status < 500 && status != http.StatusRequestTimeout {
		return fmt.Errorf("%s: %w: %w", op, channels.ErrPermanent, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// retryAfter reads how long the homeserver asked us to wait: the
// retry_after_ms field of the error body, else the Retry-After header, else
// defaultRetryAfter.
func retryAfter(httpErr mautrix.HTTPError) time.Duration {
	if httpErr.RespError != nil {
		switch v := httpErr.RespError.ExtraData["retry_after_ms"].(type) {
		case float64:
			if v > 0 {
				return time.Duration(v) * time.Millisecond
			}
		case int:
			if v > 0 {
				return time.Duration(v) * time.Millisecond
			}
		}
	}
	if httpErr.Response != nil {
		if s := httpErr.Response.Header.Get("Retry-After"); s != "" {
			if secs, err := strconv.Atoi(s); err == nil && secs > 0 {
				return time.Duration(secs) * time.Second
			}
		}
	}
	return defaultRetryAfter
}
