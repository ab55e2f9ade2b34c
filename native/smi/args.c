/*
 * The command line, as nvidia-smi 580 takes it, and its refusals: the messages and exit codes of
 * tests/data/nvidia-smi/h200-580 (bogus.txt: an unknown option, 255; a stray word, 2; i0.txt: -i
 * with -L, 2).
 */
#include <stdlib.h>
#include <string.h>

#include "smi.h"

static void unknown_option(const char *arg)
{
    if (arg[0] == '-')
        fail(RC_UNKNOWN, "ERROR: Option %s is not recognized. Please run 'nvidia-smi -h'.\n\n", arg);
    fail(RC_INVALID_ARG, "ERROR: Option %s is not recognized. Please run 'nvidia-smi -h' for help.\n\n", arg);
}

static void invalid_for_command(const char *option)
{
    fail(RC_INVALID_ARG, "ERROR: Option %s is not valid for this command. Please run 'nvidia-smi -h' for help.\n\n",
         option);
}

static void missing_value(const char *option)
{
    fail(RC_INVALID_ARG, "ERROR: Option %s requires an argument. Please run 'nvidia-smi -h' for help.\n\n", option);
}

/*
 * Whether argv[*i] is the option `shrt` or `lng` (either may be NULL); its value (after '=' or in
 * the next argument) goes to *value when `value` is set: required unless `optional`.
 */
static int opt(int argc, char **argv, int *i, const char *shrt, const char *lng, const char **value, int optional)
{
    const char *a = argv[*i];
    size_t n;
    if ((shrt != NULL && strcmp(a, shrt) == 0) || (lng != NULL && strcmp(a, lng) == 0)) {
        if (value == NULL)
            return 1;
        if (*i + 1 < argc && (!optional || argv[*i + 1][0] != '-')) {
            *value = argv[++*i];
            return 1;
        }
        if (!optional)
            missing_value(a);
        *value = NULL;
        return 1;
    }
    if (value == NULL)
        return 0;
    for (int k = 0; k < 2; k++) {
        const char *name = k ? lng : shrt;
        if (name == NULL)
            continue;
        n = strlen(name);
        if (strncmp(a, name, n) == 0 && a[n] == '=') {
            *value = a + n + 1;
            return 1;
        }
    }
    return 0;
}

static long number(const char *option, const char *s)
{
    char *end;
    long v;
    if (s == NULL || *s == '\0')
        missing_value(option);
    v = strtol(s, &end, 10);
    if (*end != '\0' || v <= 0 || v > 1000000000L)
        fail(RC_INVALID_ARG, "ERROR: Invalid value %s for option %s. Please run 'nvidia-smi -h' for help.\n\n", s,
             option);
    return v;
}

/* mig, topo, nvlink: the subcommand and its options */
static int parse_subcommand(int argc, char **argv, struct opts *o)
{
    static const char *const mig_opts[][2] = {
        {"-lgi", "--list-gpu-instances"},   {"-lgip", "--list-gpu-instance-profiles"},
        {"-lgipp", "--list-gpu-instance-possible-placements"},
        {"-lci", "--list-compute-instances"}, {"-lcip", "--list-compute-instance-profiles"},
    };
    const char *cmd = argv[1];
    o->mode = strcmp(cmd, "mig") == 0 ? MODE_MIG : strcmp(cmd, "topo") == 0 ? MODE_TOPO : MODE_NVLINK;
    for (int i = 2; i < argc; i++) {
        const char *v;
        if (opt(argc, argv, &i, "-i", "--id", &v, 0)) {
            o->ids = v;
            continue;
        }
        if (o->mode == MODE_MIG) {
            unsigned k;
            for (k = 0; k < sizeof mig_opts / sizeof mig_opts[0]; k++)
                if (strcmp(argv[i], mig_opts[k][0]) == 0 || strcmp(argv[i], mig_opts[k][1]) == 0)
                    break;
            if (k == sizeof mig_opts / sizeof mig_opts[0])
                unknown_option(argv[i]);
            o->sub = mig_opts[k][0];
        } else if (o->mode == MODE_TOPO && (strcmp(argv[i], "-m") == 0 || strcmp(argv[i], "--matrix") == 0)) {
            o->sub = "-m";
        } else if (o->mode == MODE_NVLINK && (strcmp(argv[i], "-s") == 0 || strcmp(argv[i], "--status") == 0)) {
            o->sub = "-s";
        } else if (o->mode == MODE_NVLINK && (strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--capabilities") == 0)) {
            o->sub = "-c";
        } else {
            unknown_option(argv[i]);
        }
    }
    return 0;
}

int parse_args(int argc, char **argv, struct opts *o)
{
    int list = 0, query = 0;
    memset(o, 0, sizeof *o);
    o->mode = MODE_TABLE;
    if (argc > 1 && (strcmp(argv[1], "mig") == 0 || strcmp(argv[1], "topo") == 0 || strcmp(argv[1], "nvlink") == 0))
        return parse_subcommand(argc, argv, o);
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        size_t len;
        if (opt(argc, argv, &i, "-h", "--help", NULL, 0)) {
            o->mode = MODE_HELP;
            return 0; /* the real tool prints its help whatever else the line says */
        } else if (opt(argc, argv, &i, NULL, "--version", NULL, 0)) {
            o->mode = MODE_VERSION;
            return 0;
        } else if (opt(argc, argv, &i, NULL, "--help-query-gpu", NULL, 0)) {
            o->mode = MODE_HELP_QUERY_GPU;
            return 0;
        } else if (opt(argc, argv, &i, NULL, "--help-query-compute-apps", NULL, 0)) {
            o->mode = MODE_HELP_QUERY_APPS;
            return 0;
        } else if (opt(argc, argv, &i, "-L", "--list-gpus", NULL, 0)) {
            list = 1;
        } else if (opt(argc, argv, &i, "-B", "--list-excluded-gpus", NULL, 0)) {
            o->mode = MODE_LIST_EXCLUDED;
        } else if (opt(argc, argv, &i, "-q", "--query", NULL, 0)) {
            query = 1;
        } else if (opt(argc, argv, &i, "-x", "--xml-format", NULL, 0)) {
            o->xml = 1;
        } else if (opt(argc, argv, &i, NULL, "--query-gpu", &v, 0)) {
            o->mode = MODE_QUERY_GPU;
            o->fields = v;
        } else if (opt(argc, argv, &i, NULL, "--query-compute-apps", &v, 0)) {
            o->mode = MODE_QUERY_APPS;
            o->fields = v;
        } else if (opt(argc, argv, &i, NULL, "--format", &v, 0)) {
            o->format = v;
        } else if (opt(argc, argv, &i, "-i", "--id", &v, 0)) {
            o->ids = v;
        } else if (opt(argc, argv, &i, "-f", "--filename", &v, 0)) {
            o->filename = v;
        } else if (opt(argc, argv, &i, "-d", "--display", &v, 0)) {
            o->display = v;
        } else if (change_option(argv[i], &len) != NULL) {
            o->mode = MODE_MODIFY;
            o->sub = change_option(argv[i], &len);
            if (argv[i][len] == '=')
                o->fields = argv[i] + len + 1;
            else if (i + 1 < argc)
                o->fields = argv[++i];
            else
                missing_value(argv[i]);
        } else if (opt(argc, argv, &i, "-lms", "--loop-ms", &v, 0)) {
            o->loop_ms = number(argv[i], v);
        } else if (opt(argc, argv, &i, "-l", "--loop", &v, 1)) {
            o->loop_ms = v == NULL ? 5000 : number("-l", v) * 1000; /* -l alone: every 5 s */
        } else {
            unknown_option(argv[i]);
        }
    }
    if (list) {
        if (o->ids != NULL)
            invalid_for_command("-i");
        o->mode = MODE_LIST;
    } else if (query) {
        o->mode = MODE_QUERY;
    }
    return 0;
}
