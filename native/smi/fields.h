/* The --query-gpu fields: the real tool's list (names, aliases, order, units), one row each. */
#ifndef DRA_FAKE_SMI_FIELDS_H
#define DRA_FAKE_SMI_FIELDS_H

#include "smi.h"

struct field {
    const char *name;    /* NULL: a section heading of --help-query-gpu */
    const char *aliases; /* other accepted names, '|'-separated; a section: its title */
    const char *unit;    /* "MiB": header "name [MiB]", value "123 MiB" (nounits: "123") */
    getter_fn *get;
    int arg;
    const char *help;    /* --help-query-gpu text (ours; the names are the real tool's) */
};

extern const struct field query_fields[];
extern const unsigned query_field_count;

/* The field a name (or alias) selects; NULL when the real tool refuses the name. */
const struct field *find_field(const char *name);

#endif
