// Package security holds the tests of partitionq's security contract, run
// against the real PostgreSQL with the real PgQ:
//
//   - least privilege (roles_test.go): the four roles of sql/roles.sql
//     (producer, worker, operator, viewer) can each do their job through the
//     library and the command, and cannot do the others' — every refusal is
//     PostgreSQL's own (SQLSTATE 42501) and leaves nothing changed;
//   - hostile strings (injection_test.go): SQL in queue, group, key and type
//     strings is refused (names) or stored, handled and shown literally
//     (keys, types, payloads), never executed.
//
// The roles are cluster-wide, so each test creates them under a name prefix
// of its own and drops them at cleanup. See docs/security.md.
package security
