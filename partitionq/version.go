package partitionq

import "github.com/partitionq/partitionq/partitionq/internal/store"

// Version is the version of this library and of the partitionq command.
const Version = "0.4.0-dev"

// SchemaVersion is the version of partitionq's schema (the tables and
// functions in the database's schema "partitionq") that this library
// writes and reads. Setup, and a worker's start, upgrade an older schema in
// place; a schema newer than this is refused with an error naming both
// versions (docs/operations.md, "Upgrading partitionq's schema").
func SchemaVersion() int { return store.Latest() }
