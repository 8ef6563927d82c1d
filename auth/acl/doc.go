// Package acl reads Mosquitto's acl_file and answers the broker's
// authorization questions from it (it implements auth.Authorizer).
//
// The file is read as Mosquitto 2 reads it: "user NAME" starts a user's
// section; "topic [read|write|readwrite|deny] FILTER" adds a rule to the
// current section (lines before any "user" line form the section of
// clients without a username); "pattern [read|write|readwrite|deny] FILTER"
// adds a rule for every client, with %u replaced by the username and %c by
// the client id. No access word means readwrite. Everything after the
// access word is the filter, so filters may contain spaces. Lines starting
// with # are comments. One keyword is mqttd's own: a line "admin" in a
// user's section gives that user the admin role (Rules.Admin), which the
// management API asks about; it grants no topic, and Mosquitto would not
// read a file that has it. Anywhere else (before any "user" line, or with
// words after it) it is an error. Any other line is an error naming the file and line,
// and a file with an error grants nothing: Parse returns no Rules and
// Authorizer.Reload keeps the rules it had.
//
// Decisions follow Mosquitto 2's order: the client's own section first
// (its deny rules, then its allow rules), then the patterns (deny, then
// allow); the first rule that matches decides, and a deny rule matches
// whatever access is asked. Nothing matching means denied. Two departures
// from Mosquitto, both refusing more, never less:
//
//   - Subscribe: Mosquitto 2 grants every SUBSCRIBE and checks only each
//     delivered message. Here a subscription filter needs read access on
//     the whole filter: some rule must cover every topic the filter can
//     match (rule sensors/# covers sensors/+/temp; rule sensors/+/temp does
//     not cover sensors/#), and a deny rule covering the whole filter
//     refuses it. Each message delivered is still checked on its own topic
//     (auth.Read), so a filter granted because it is covered still never
//     delivers a topic a deny rule names. A shared subscription is decided
//     on its filter, the $share/{group}/ prefix removed; the group plays no
//     part.
//   - Identities: Mosquitto denies every pattern-based decision to a client
//     whose username or client id contains + or #, so that a username
//     like # cannot turn devices/%u/# into devices/#/#. This package does
//     the same and also refuses pattern decisions when a username or client
//     id that some pattern substitutes contains / (a client id a/b would
//     reach below its own level) or starts with $ (it would put the rule
//     among the $ topics).
//
// $SYS topics are read-only for clients whatever the file says: publish and
// will on $SYS or below are refused. As in MQTT [MQTT-4.7.2-1], rules
// starting with + or # never match topics starting with $.
//
// It imports auth and topictrie (for filter validation) and nothing else of
// mqttd's.
package acl
