package io.pidquota.plugin;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The throttle set, as pidquota's compacted state topic gives it: pure, and clock-free (every
 * time is a parameter, in wall-clock ms).
 *
 * <p>Records (keys and values are UTF-8 text; a null value is a tombstone):
 * <ul>
 *   <li>{@code t:User:crash} = {@code 1767225660000}: refuse InitProducerId to {@code User:crash}
 *       until that time; its tombstone ends it at once.</li>
 *   <li>{@code c:4:loopUser:crash} = {@code 1767225660000}: the same, narrowed to the requests of
 *       client id {@code loop} (its length in UTF-16 code units, no leading zero, a colon, the
 *       id, then the principal: any client id reads unambiguously); the user's other client ids
 *       are served.</li>
 *   <li>{@code h} = {@code AT_MS MAX_AGE_MS}: pidquota's heartbeat. The set is obeyed only while
 *       {@code now - AT_MS <= MAX_AGE_MS}: a pidquota that is gone (or a state topic that stopped)
 *       refuses nothing after that (fail open).</li>
 *   <li>{@code switch} = {@code off} or {@code on}: the kill switch, cluster-wide, no broker restart.</li>
 * </ul>
 * Anything else (another key, a value that is not a number, a wildcard or empty principal, bytes
 * that are not UTF-8) is skipped and counted, never applied.
 *
 * <p>Worked example: after {@code h = "1000 30000"} and {@code t:User:crash = "61000"},
 * {@code refuses("User:crash", 20000)} is true; at 40000 it is false (the heartbeat is 39 s old,
 * over 30 s: fail open) until a newer heartbeat comes; at 70000, with a fresh heartbeat, false
 * (the throttle ended at 61000). A clock skew of a few seconds between pidquota and a broker moves
 * each end by that much, against holds of minutes.
 */
public final class ThrottleState {
    public static final String THROTTLE = "t:";
    public static final String CLIENT = "c:";
    static final int MAX_CLIENT = 4096;
    public static final String HEARTBEAT = "h";
    public static final String SWITCH = "switch";
    static final long MAX_MS = 1L << 53;
    static final int MAX_PRINCIPAL = 4096;

    /** A principal (a String), or a principal's client id (a {@link Narrow}) -> its throttle's end. */
    private final ConcurrentHashMap<Object, Long> until = new ConcurrentHashMap<>();

    /** One client id of one principal. */
    record Narrow(String principal, String clientId) {}
    private volatile long heartbeatAtMs = -1;
    private volatile long maxAgeMs = 0;
    private volatile boolean enabled = true;

    /** Applies one record; returns null, or why it was skipped. */
    public String apply(byte[] key, byte[] value) {
        String k = text(key);
        if (k == null) {
            return "a key that is not UTF-8 text";
        }
        String v = value == null ? null : text(value);
        if (value != null && v == null) {
            return "the value of " + shown(k) + " is not UTF-8 text";
        }
        if (k.startsWith(THROTTLE)) {
            return throttle(k.substring(THROTTLE.length()), null, v);
        }
        if (k.startsWith(CLIENT)) {
            return client(k.substring(CLIENT.length()), v);
        }
        if (k.equals(HEARTBEAT)) {
            return heartbeat(v);
        }
        if (k.equals(SWITCH)) {
            if ("off".equals(v) || "on".equals(v) || v == null) {
                enabled = !"off".equals(v);
                return null;
            }
            return "switch must be on or off, not " + shown(v);
        }
        return "an unknown key " + shown(k);
    }

    /** {@code N:CLIENTPRINCIPAL}: N the client id's length in chars. */
    private String client(String rest, String v) {
        int colon = rest.indexOf(':');
        // no leading zero: one throttle has one key, whose tombstone ends it
        long n = colon > 0 && colon <= 4 && rest.charAt(0) != '0' ? number(rest.substring(0, colon)) : -1;
        if (n < 1 || n > MAX_CLIENT || colon + 1 + n > rest.length()) {
            return "a client throttle's key must be c:LENGTH:CLIENT_IDPRINCIPAL, not " + shown(CLIENT + rest);
        }
        String clientId = rest.substring(colon + 1, colon + 1 + (int) n);
        return throttle(rest.substring(colon + 1 + (int) n), clientId, v);
    }

    private String throttle(String principal, String clientId, String v) {
        String why = principalProblem(principal);
        if (why != null) {
            return why;
        }
        Object key = clientId == null ? principal : new Narrow(principal, clientId);
        if (v == null) {
            until.remove(key);
            return null;
        }
        long ms = number(v.trim());
        if (ms < 0) {
            return "the end of " + shown(principal) + "'s throttle is not a time in ms: " + shown(v);
        }
        until.put(key, ms);
        return null;
    }

    private String heartbeat(String v) {
        if (v == null) {
            heartbeatAtMs = -1;
            return null;
        }
        String[] parts = v.trim().split(" ");
        long at = parts.length == 2 ? number(parts[0]) : -1;
        long age = parts.length == 2 ? number(parts[1]) : -1;
        if (at < 0 || age < 1000 || age > 3_600_000) {
            return "a heartbeat must be 'AT_MS MAX_AGE_MS' (1 s to 1 h), not " + shown(v);
        }
        heartbeatAtMs = at;
        maxAgeMs = age;
        return null;
    }

    /** Whether InitProducerId is refused to {@code principal} at {@code nowMs}. */
    public boolean refuses(String principal, long nowMs) {
        return refuses(principal, null, nowMs);
    }

    /** Whether InitProducerId is refused to {@code principal}'s client {@code clientId} (null: not
     * known) at {@code nowMs}: the principal is throttled, or that client id of it. */
    public boolean refuses(String principal, String clientId, long nowMs) {
        if (!enabled || !fresh(nowMs)) {
            return false;
        }
        Long end = until.get(principal);
        if (end != null && end > nowMs) {
            return true;
        }
        if (clientId == null) {
            return false;
        }
        Long narrow = until.get(new Narrow(principal, clientId));
        return narrow != null && narrow > nowMs;
    }

    /** pidquota's heartbeat is recent enough to obey the set. */
    public boolean fresh(long nowMs) {
        long at = heartbeatAtMs;
        return at >= 0 && nowMs - at <= maxAgeMs;
    }

    public boolean enabled() {
        return enabled;
    }

    /** The principals (and principals' client ids) throttled at {@code nowMs}, heartbeat or not. */
    public int throttled(long nowMs) {
        int n = 0;
        for (Long end : until.values()) {
            if (end > nowMs) {
                n++;
            }
        }
        return n;
    }

    /** Forget everything (the state topic was deleted or recreated): refuse nothing. */
    public void clear() {
        until.clear();
        heartbeatAtMs = -1;
    }

    static String principalProblem(String principal) {
        if (!principal.startsWith("User:") || principal.length() > MAX_PRINCIPAL) {
            return "not a user principal: " + shown(principal);
        }
        String name = principal.substring(5);
        if (name.isBlank() || name.equals("*")) {
            return "a wildcard or empty principal: " + shown(principal);
        }
        return null;
    }

    private static long number(String s) {
        if (s.isEmpty() || s.length() > 16) {
            return -1;
        }
        long n = 0;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c < '0' || c > '9') {
                return -1;
            }
            n = n * 10 + (c - '0');
        }
        return n <= MAX_MS ? n : -1;
    }

    private static String text(byte[] bytes) {
        if (bytes == null) {
            return null;
        }
        try {
            return StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT)
                .decode(ByteBuffer.wrap(bytes))
                .toString();
        } catch (CharacterCodingException e) {
            return null;
        }
    }

    static String shown(String s) {
        String cut = s.length() > 60 ? s.substring(0, 60) + "..." : s;
        return "'" + cut.replaceAll("\\p{Cntrl}", "?") + "'";
    }
}
