# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_lifeline_global_optspecs
    string join \n log-format= h/help V/version
end

function __fish_lifeline_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_lifeline_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_lifeline_using_subcommand
    set -l cmd (__fish_lifeline_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c lifeline -n "__fish_lifeline_needs_command" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_needs_command" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_needs_command" -s V -l version -d 'Print version'
complete -c lifeline -n "__fish_lifeline_needs_command" -f -a "man" -d 'Print the manual page (roff): `lifeline man | man -l -`'
complete -c lifeline -n "__fish_lifeline_needs_command" -f -a "completions" -d 'Print a completion script for a shell (bash, zsh, fish, elvish, powershell)'
complete -c lifeline -n "__fish_lifeline_needs_command" -f -a "serve" -d 'Run against a real cluster, configured by a TOML file and LIFELINE_* variables'
complete -c lifeline -n "__fish_lifeline_needs_command" -f -a "check-config" -d 'Validate a config file (with LIFELINE_* overrides) and print the result'
complete -c lifeline -n "__fish_lifeline_needs_command" -f -a "demo" -d 'Run Lifeline with a simulated cluster and chaos; dashboard on localhost'
complete -c lifeline -n "__fish_lifeline_needs_command" -f -a "reconnect" -d 'Ask agents to reconnect through a running Lifeline\'s REST API, and print what became of each signal. Exits non-zero unless every signal was acked'
complete -c lifeline -n "__fish_lifeline_needs_command" -f -a "settings" -d 'Read and change the dynamic settings of a running Lifeline (RFD 0016)'
complete -c lifeline -n "__fish_lifeline_needs_command" -f -a "maintenance" -d 'Declare, end and list maintenance windows of a running Lifeline: while one is active, the strandings it explains are planned (shown, not acted on automatically, not notified)'
complete -c lifeline -n "__fish_lifeline_needs_command" -f -a "alert-rules" -d 'Print Prometheus alerting rules (YAML) over Lifeline\'s metrics'
complete -c lifeline -n "__fish_lifeline_needs_command" -f -a "grafana-dashboard" -d 'Print a Grafana dashboard (JSON, for import) over Lifeline\'s metrics'
complete -c lifeline -n "__fish_lifeline_needs_command" -f -a "token" -d 'Make API and join tokens'
complete -c lifeline -n "__fish_lifeline_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lifeline -n "__fish_lifeline_using_subcommand man" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand man" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand completions" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand completions" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand serve" -l config -d 'Config file (see lifeline.example.toml). Optional: defaults apply' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand serve" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand serve" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand check-config" -l config -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand check-config" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand check-config" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l listen -d 'HTTP address (dashboard, API)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l grpc-listen -d 'gRPC address (agent signals, Lifeline\'s health)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l agents -r
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l proxies -r
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l auth-servers -r
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l ttl -d 'Announce TTL of proxies, auth servers and agents (e.g. 30s, 1m)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l chaos-period -d 'Time between chaos steps; 0 turns chaos off' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l seed -r
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l db -d 'SQLite file for the demo' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l source -d 'The protocol the simulated cluster speaks: Lifeline\'s ClusterEvents, or Teleport\'s Auth API over mutual TLS' -r -f -a "lifeline\t'Lifeline\'s open `ClusterEvents` protocol (plaintext, or `https://`)'
teleport\t'Teleport\'s own Auth API over mutual TLS with an identity file'"
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l legacy-share -d 'Share of simulated agents that ignore discovery TTLs (they stay on a dead proxy until Lifeline signals them)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l token -d 'The API token to sign in with (all roles); a random one is made and printed when not given' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l teleport-version -d 'With --source teleport: the Teleport major version the simulated Auth plays. Before 18 it serves no grpc.health.v1 (Lifeline falls back to each Auth\'s heartbeat), its INIT carries no WatchStatus, and a kind its role cannot read refuses the whole watch' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l config -d 'A TOML file whose [notify] and [access] sections the demo uses (whom to tell, more tokens); any other section is refused' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l no-auto-reconnect -d 'Leave stranded agents for you to reconnect from the dashboard (automatic reconnects are on by default)'
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -l tls -d 'Serve the dashboard, API and gRPC over TLS, with a throwaway CA made for this run (written next to --db; printed at start)'
complete -c lifeline -n "__fish_lifeline_using_subcommand demo" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lifeline -n "__fish_lifeline_using_subcommand reconnect" -l proxy -d 'The proxy whose tunnel the agent should leave (default: its least healthy)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand reconnect" -l reason -d 'Why, for the audit log' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand reconnect" -l server -d 'Lifeline\'s HTTP address' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand reconnect" -l wait -d 'How long to wait for the agents\' acks' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand reconnect" -l token -d 'API token with the update role' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand reconnect" -l ca-file -d 'CA certificates (PEM) to trust for an https:// --server, besides the system\'s' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand reconnect" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand reconnect" -l stranded -d 'Every agent Lifeline currently counts as stranded'
complete -c lifeline -n "__fish_lifeline_using_subcommand reconnect" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and not __fish_seen_subcommand_from get set rm help" -l server -d 'Lifeline\'s HTTP address' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and not __fish_seen_subcommand_from get set rm help" -l token -d 'API token (read to get when reads need one; update to set and rm; also create with --confirm)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and not __fish_seen_subcommand_from get set rm help" -l ca-file -d 'CA certificates (PEM) to trust for an https:// --server, besides the system\'s' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and not __fish_seen_subcommand_from get set rm help" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and not __fish_seen_subcommand_from get set rm help" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and not __fish_seen_subcommand_from get set rm help" -f -a "get" -d 'Show every setting, or one with its history'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and not __fish_seen_subcommand_from get set rm help" -f -a "set" -d 'Set a setting (origin becomes `dynamic`). The value is JSON when it parses as JSON (`true`, `0.3`, `{...}`), a string otherwise (`6h`)'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and not __fish_seen_subcommand_from get set rm help" -f -a "rm" -d 'Reset a setting to its default (refused for config-file settings)'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and not __fish_seen_subcommand_from get set rm help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from get" -l server -d 'Lifeline\'s HTTP address' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from get" -l token -d 'API token (read to get when reads need one; update to set and rm; also create with --confirm)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from get" -l ca-file -d 'CA certificates (PEM) to trust for an https:// --server, besides the system\'s' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from get" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from get" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from set" -l server -d 'Lifeline\'s HTTP address' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from set" -l token -d 'API token (read to get when reads need one; update to set and rm; also create with --confirm)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from set" -l ca-file -d 'CA certificates (PEM) to trust for an https:// --server, besides the system\'s' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from set" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from set" -s f -l force -d 'Overwrite a value that is not the default'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from set" -l confirm -d 'With --force: overwrite a value the config file manages, until the next restart (needs the create role)'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from set" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from rm" -l server -d 'Lifeline\'s HTTP address' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from rm" -l token -d 'API token (read to get when reads need one; update to set and rm; also create with --confirm)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from rm" -l ca-file -d 'CA certificates (PEM) to trust for an https:// --server, besides the system\'s' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from rm" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from rm" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from help" -f -a "get" -d 'Show every setting, or one with its history'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from help" -f -a "set" -d 'Set a setting (origin becomes `dynamic`). The value is JSON when it parses as JSON (`true`, `0.3`, `{...}`), a string otherwise (`6h`)'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from help" -f -a "rm" -d 'Reset a setting to its default (refused for config-file settings)'
complete -c lifeline -n "__fish_lifeline_using_subcommand settings; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and not __fish_seen_subcommand_from start end delete list help" -l server -d 'Lifeline\'s HTTP address' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and not __fish_seen_subcommand_from start end delete list help" -l token -d 'API token (update to start and end; read to list when reads need one)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and not __fish_seen_subcommand_from start end delete list help" -l ca-file -d 'CA certificates (PEM) to trust for an https:// --server, besides the system\'s' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and not __fish_seen_subcommand_from start end delete list help" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and not __fish_seen_subcommand_from start end delete list help" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and not __fish_seen_subcommand_from start end delete list help" -f -a "start" -d 'Start a window (now, or at --from) for --for or until --until'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and not __fish_seen_subcommand_from start end delete list help" -f -a "end" -d 'End a window now'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and not __fish_seen_subcommand_from start end delete list help" -f -a "delete" -d 'Delete a window (its audit stays)'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and not __fish_seen_subcommand_from start end delete list help" -f -a "list" -d 'List windows, newest first (only those not over, unless --all)'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and not __fish_seen_subcommand_from start end delete list help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from start" -l target -d '`proxy/NAME`, `auth_server/NAME` or `agent/NAME`; globs (`*`, `?`, `[a-z]`) allowed. Repeat for several' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from start" -l for -d 'How long it lasts from its start (`2h`, `30m`)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from start" -l until -d 'When it ends (RFC 3339)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from start" -l from -d 'When it starts (RFC 3339; default now)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from start" -l reason -d 'Why: shown on the dashboard and audited' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from start" -l server -d 'Lifeline\'s HTTP address' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from start" -l token -d 'API token (update to start and end; read to list when reads need one)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from start" -l ca-file -d 'CA certificates (PEM) to trust for an https:// --server, besides the system\'s' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from start" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from start" -l all -d 'The window covers every agent or proxy (`agent/*`): say so'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from start" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from end" -l server -d 'Lifeline\'s HTTP address' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from end" -l token -d 'API token (update to start and end; read to list when reads need one)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from end" -l ca-file -d 'CA certificates (PEM) to trust for an https:// --server, besides the system\'s' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from end" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from end" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from delete" -l server -d 'Lifeline\'s HTTP address' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from delete" -l token -d 'API token (update to start and end; read to list when reads need one)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from delete" -l ca-file -d 'CA certificates (PEM) to trust for an https:// --server, besides the system\'s' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from delete" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from delete" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from list" -l server -d 'Lifeline\'s HTTP address' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from list" -l token -d 'API token (update to start and end; read to list when reads need one)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from list" -l ca-file -d 'CA certificates (PEM) to trust for an https:// --server, besides the system\'s' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from list" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from list" -l all
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from help" -f -a "start" -d 'Start a window (now, or at --from) for --for or until --until'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from help" -f -a "end" -d 'End a window now'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from help" -f -a "delete" -d 'Delete a window (its audit stays)'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from help" -f -a "list" -d 'List windows, newest first (only those not over, unless --all)'
complete -c lifeline -n "__fish_lifeline_using_subcommand maintenance; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lifeline -n "__fish_lifeline_using_subcommand alert-rules" -l config -d 'Config file, for `server.external_url`' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand alert-rules" -l external-url -d 'Where the dashboard is reached (overrides server.external_url)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand alert-rules" -l stranded-for -d 'How long a root cause may strand agents before it alerts' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand alert-rules" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand alert-rules" -l kubernetes -d 'Print a Prometheus Operator PrometheusRule instead of a rules file'
complete -c lifeline -n "__fish_lifeline_using_subcommand alert-rules" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand grafana-dashboard" -l config -d 'Config file, for `server.external_url`' -r -F
complete -c lifeline -n "__fish_lifeline_using_subcommand grafana-dashboard" -l external-url -d 'Where the dashboard is reached (overrides server.external_url)' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand grafana-dashboard" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand grafana-dashboard" -l kubernetes -d 'Print a ConfigMap for Grafana\'s dashboard sidecar instead'
complete -c lifeline -n "__fish_lifeline_using_subcommand grafana-dashboard" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand token; and not __fish_seen_subcommand_from new help" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand token; and not __fish_seen_subcommand_from new help" -s h -l help -d 'Print help'
complete -c lifeline -n "__fish_lifeline_using_subcommand token; and not __fish_seen_subcommand_from new help" -f -a "new" -d 'Print a new random token and the config lines that admit it (only its SHA-256 goes in the config file)'
complete -c lifeline -n "__fish_lifeline_using_subcommand token; and not __fish_seen_subcommand_from new help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lifeline -n "__fish_lifeline_using_subcommand token; and __fish_seen_subcommand_from new" -l name -d 'The name the audit and the dashboard show' -r
complete -c lifeline -n "__fish_lifeline_using_subcommand token; and __fish_seen_subcommand_from new" -l roles -d 'Roles (comma-separated)' -r -f -a "read\t'GET anything (when reads need a token at all)'
update\t'PUT and DELETE settings, manual reconnects'
create\t'In addition to `update`: overwrite a setting the config file manages'"
complete -c lifeline -n "__fish_lifeline_using_subcommand token; and __fish_seen_subcommand_from new" -l log-format -d 'Log format on stderr' -r -f -a "text\t''
json\t''"
complete -c lifeline -n "__fish_lifeline_using_subcommand token; and __fish_seen_subcommand_from new" -l join -d 'Make an agents\' join token instead of an API token'
complete -c lifeline -n "__fish_lifeline_using_subcommand token; and __fish_seen_subcommand_from new" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lifeline -n "__fish_lifeline_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "new" -d 'Print a new random token and the config lines that admit it (only its SHA-256 goes in the config file)'
complete -c lifeline -n "__fish_lifeline_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and not __fish_seen_subcommand_from man completions serve check-config demo reconnect settings maintenance alert-rules grafana-dashboard token help" -f -a "man" -d 'Print the manual page (roff): `lifeline man | man -l -`'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and not __fish_seen_subcommand_from man completions serve check-config demo reconnect settings maintenance alert-rules grafana-dashboard token help" -f -a "completions" -d 'Print a completion script for a shell (bash, zsh, fish, elvish, powershell)'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and not __fish_seen_subcommand_from man completions serve check-config demo reconnect settings maintenance alert-rules grafana-dashboard token help" -f -a "serve" -d 'Run against a real cluster, configured by a TOML file and LIFELINE_* variables'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and not __fish_seen_subcommand_from man completions serve check-config demo reconnect settings maintenance alert-rules grafana-dashboard token help" -f -a "check-config" -d 'Validate a config file (with LIFELINE_* overrides) and print the result'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and not __fish_seen_subcommand_from man completions serve check-config demo reconnect settings maintenance alert-rules grafana-dashboard token help" -f -a "demo" -d 'Run Lifeline with a simulated cluster and chaos; dashboard on localhost'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and not __fish_seen_subcommand_from man completions serve check-config demo reconnect settings maintenance alert-rules grafana-dashboard token help" -f -a "reconnect" -d 'Ask agents to reconnect through a running Lifeline\'s REST API, and print what became of each signal. Exits non-zero unless every signal was acked'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and not __fish_seen_subcommand_from man completions serve check-config demo reconnect settings maintenance alert-rules grafana-dashboard token help" -f -a "settings" -d 'Read and change the dynamic settings of a running Lifeline (RFD 0016)'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and not __fish_seen_subcommand_from man completions serve check-config demo reconnect settings maintenance alert-rules grafana-dashboard token help" -f -a "maintenance" -d 'Declare, end and list maintenance windows of a running Lifeline: while one is active, the strandings it explains are planned (shown, not acted on automatically, not notified)'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and not __fish_seen_subcommand_from man completions serve check-config demo reconnect settings maintenance alert-rules grafana-dashboard token help" -f -a "alert-rules" -d 'Print Prometheus alerting rules (YAML) over Lifeline\'s metrics'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and not __fish_seen_subcommand_from man completions serve check-config demo reconnect settings maintenance alert-rules grafana-dashboard token help" -f -a "grafana-dashboard" -d 'Print a Grafana dashboard (JSON, for import) over Lifeline\'s metrics'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and not __fish_seen_subcommand_from man completions serve check-config demo reconnect settings maintenance alert-rules grafana-dashboard token help" -f -a "token" -d 'Make API and join tokens'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and not __fish_seen_subcommand_from man completions serve check-config demo reconnect settings maintenance alert-rules grafana-dashboard token help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and __fish_seen_subcommand_from settings" -f -a "get" -d 'Show every setting, or one with its history'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and __fish_seen_subcommand_from settings" -f -a "set" -d 'Set a setting (origin becomes `dynamic`). The value is JSON when it parses as JSON (`true`, `0.3`, `{...}`), a string otherwise (`6h`)'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and __fish_seen_subcommand_from settings" -f -a "rm" -d 'Reset a setting to its default (refused for config-file settings)'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and __fish_seen_subcommand_from maintenance" -f -a "start" -d 'Start a window (now, or at --from) for --for or until --until'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and __fish_seen_subcommand_from maintenance" -f -a "end" -d 'End a window now'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and __fish_seen_subcommand_from maintenance" -f -a "delete" -d 'Delete a window (its audit stays)'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and __fish_seen_subcommand_from maintenance" -f -a "list" -d 'List windows, newest first (only those not over, unless --all)'
complete -c lifeline -n "__fish_lifeline_using_subcommand help; and __fish_seen_subcommand_from token" -f -a "new" -d 'Print a new random token and the config lines that admit it (only its SHA-256 goes in the config file)'
