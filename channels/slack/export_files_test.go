package slack

// Opener exposes the url_private download of a file link for tests.
var Opener = (*Adapter).opener
