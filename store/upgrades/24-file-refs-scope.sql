-- v24: file_refs by conversation
-- attachments.maxStoredMB sums the bytes a conversation names on every
-- message with files: file_refs is read by scope.
CREATE INDEX file_refs_scope ON file_refs (scope);
