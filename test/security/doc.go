// Package security holds the tests of partitionq's security contract, run
// against the real PostgreSQL with the real engine (PgQ or PgQue):
//
//   - least privilege (roles_test.go): the four roles of sql/roles.sql
//     (producer, worker, operator, viewer) can each do their job through the
//     library and the command, and cannot do the others' — every refusal is
//     PostgreSQL's own (SQLSTATE 42501) and leaves nothing changed;
//   - the privilege matrix (matrix_test.go): what each role may do on every
//     table, sequence and function of partitionq's schema, and the
//     migration from schema version 3, which keeps the records and moves
//     the grants;
//   - records nobody can forge (records_test.go): the dead letters and the
//     audit trail are written only through partitionq's record functions,
//     which record session_user and refuse what is not true;
//   - no squatting (squat_test.go): a role with CONNECT alone cannot take a
//     slot or the ticker's turn;
//   - hostile strings (injection_test.go): SQL in queue, group, key and type
//     strings is refused (names) or stored, handled and shown literally
//     (keys, types, payloads), never executed.
//
// The roles are cluster-wide, so each test creates them under a name prefix
// of its own and drops them at cleanup. See docs/security.md.
package security
