// Why this shim exists: SQLite's SQLITE_TRANSIENT is a cast of -1 to a function pointer, which
// Swift cannot import as a macro.
#include <sqlite3.h>

static inline int msso_sqlite_bind_text(sqlite3_stmt *statement, int index, const char *text) {
    return sqlite3_bind_text(statement, index, text, -1, SQLITE_TRANSIENT);
}
