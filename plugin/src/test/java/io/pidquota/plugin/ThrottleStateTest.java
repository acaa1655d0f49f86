package io.pidquota.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.Random;
import org.junit.jupiter.api.Test;

class ThrottleStateTest {
    private static byte[] b(String s) {
        return s == null ? null : s.getBytes(StandardCharsets.UTF_8);
    }

    @Test
    void theDocstringsExample() {
        ThrottleState s = new ThrottleState();
        assertNull(s.apply(b("h"), b("1000 30000"), 0));
        assertNull(s.apply(b("t:User:crash"), b("61000"), 0));
        assertTrue(s.refuses("User:crash", 20000));
        assertFalse(s.refuses("User:steady", 20000));
        assertFalse(s.refuses("User:crash", 40000));  // the heartbeat is too old: fail open
        assertNull(s.apply(b("h"), b("65000 30000"), 0));
        assertFalse(s.refuses("User:crash", 70000));  // its throttle ended at 61000
    }

    @Test
    void aClientThrottleRefusesThatClientIdOfThePrincipalAlone() {
        ThrottleState s = new ThrottleState();
        s.apply(b("h"), b("0 60000"), 0);
        assertNull(s.apply(b("c:4:loopUser:crash"), b("99000"), 0));
        assertNull(s.apply(b("c:3:a:bUser:crash"), b("99000"), 0));  // a client id holding a colon
        assertNull(s.apply(b("c:3:\uD83D\uDE00aUser:crash"), b("99000"), 0));  // an emoji: 2 UTF-16 units
        assertTrue(s.refuses("User:crash", "\uD83D\uDE00a", 1000));
        assertTrue(s.refuses("User:crash", "loop", 1000));
        assertTrue(s.refuses("User:crash", "a:b", 1000));
        assertFalse(s.refuses("User:crash", "deploy", 1000));  // its other applications are served
        assertFalse(s.refuses("User:crash", null, 1000));
        assertFalse(s.refuses("User:crash", 1000));
        assertFalse(s.refuses("User:other", "loop", 1000));
        assertEquals(3, s.throttled(1000));
        assertNull(s.apply(b("c:4:loopUser:crash"), null, 0));
        assertFalse(s.refuses("User:crash", "loop", 1000));
        assertNull(s.apply(b("t:User:crash"), b("99000"), 0));  // the whole user: every client id
        assertTrue(s.refuses("User:crash", "deploy", 1000));
    }

    @Test
    void aTombstoneAndTheSwitchEndItAtOnce() {
        ThrottleState s = new ThrottleState();
        s.apply(b("h"), b("0 60000"), 0);
        s.apply(b("t:User:crash"), b("99000"), 0);
        assertNull(s.apply(b("switch"), b("off"), 0));
        assertFalse(s.refuses("User:crash", 1000));
        s.apply(b("switch"), b("on"), 0);
        assertTrue(s.refuses("User:crash", 1000));
        s.apply(b("t:User:crash"), null, 0);
        assertFalse(s.refuses("User:crash", 1000));
    }

    @Test
    void recordsPidquotaWouldNotWriteAreSkippedWithTheReason() {
        ThrottleState s = new ThrottleState();
        s.apply(b("h"), b("0 60000"), 0);
        String[][] bad = {
            {"t:User:*", "99000"}, {"t:User:", "99000"}, {"t:Group:x", "99000"}, {"t:User:a", "soon"},
            {"t:User:a", "-5"}, {"t:User:a", "99999999999999999999"}, {"h", "now"}, {"h", "0 1"},
            {"switch", "maybe"}, {"other", "1"}, {"c:4:loopUser:*", "9"}, {"c:9:loopUser:a", "9"},
            {"c:0:User:a", "9"}, {"c:x:loopUser:a", "9"}, {"c:", "9"}, {"c:4:loop", "9"}, {"c:00004:loopUser:a", "9"},
            {"c:04:loopUser:a", "9"},
        };
        for (String[] kv : bad) {
            assertNotNull(s.apply(b(kv[0]), b(kv[1]), 0), kv[0] + "=" + kv[1]);
        }
        assertNotNull(s.apply(new byte[] {(byte) 0xff, 't', ':'}, b("1"), 0));
        assertNotNull(s.apply(b("t:User:a"), new byte[] {(byte) 0xc3}, 0));
        assertEquals(0, s.throttled(0));
        assertFalse(s.refuses("User:*", 1));
    }

    @Test
    void noBytesMakeItThrow() {  // issue 44, the Java side: a fuzz of keys and values
        ThrottleState s = new ThrottleState();
        Random rng = new Random(936);
        String[] keys = {"t:User:a", "h", "switch", "t:", "t:User:" + "x".repeat(5000), "c:1:aUser:a", "c:9999:a"};
        for (int i = 0; i < 200_000; i++) {
            byte[] key = rng.nextInt(4) == 0 ? random(rng) : b(keys[rng.nextInt(keys.length)]);
            byte[] value = rng.nextInt(10) == 0 ? null : rng.nextBoolean() ? random(rng) : b(Long.toString(rng.nextLong()));
            s.apply(key, value, 0);
            s.refuses("User:a", rng.nextLong());
            s.refuses("User:a", "a", rng.nextLong());
        }
    }

    @Test
    void endedThrottlesAreDroppedOnArrivalAndByPrune() {  // issue 53: crafted, long-ended keys
        ThrottleState s = new ThrottleState();
        String pad = "x".repeat(4000);
        for (int i = 0; i < 40_000; i++) {
            assertNull(s.apply(b("c:4:loopUser:" + pad + i), b("5000"), 10_000));
        }
        assertEquals(0, s.size());
        s.apply(b("t:User:a"), b("20000"), 10_000);
        s.apply(b("t:User:b"), b("90000"), 10_000);
        assertEquals(2, s.size());
        assertEquals(1, s.prune(30_000));
        assertEquals(1, s.size());
        s.apply(b("t:User:b"), b("1"), 40_000);  // a record whose end is past: as its tombstone
        assertEquals(0, s.size());
    }

    @Test
    void overTheBoundNothingIsStoredOrRefusedUntilItShrinks() {  // issue 53: 10^5 crafted keys
        ThrottleState s = new ThrottleState();
        s.apply(b("h"), b("0 60000"), 0);
        s.apply(b("t:User:crash"), b("99000"), 0);
        assertTrue(s.refuses("User:crash", 1000));
        for (int i = 0; i < 100_000; i++) {
            s.apply(b("t:User:u" + i), b("99000"), 0);
        }
        assertEquals(ThrottleState.MAX_ENTRIES, s.size());
        assertTrue(s.overflowing());
        assertFalse(s.refuses("User:crash", 1000));  // fail open, said once by the authorizer
        assertNotNull(s.openBecause(1000));
        for (int i = 0; i < ThrottleState.MAX_ENTRIES / 2; i++) {
            s.apply(b("t:User:u" + i), null, 0);
        }
        assertFalse(s.overflowing());
        assertTrue(s.refuses("User:crash", 1000));
    }

    @Test
    void longKeysAreBoundedByTheirCharactersToo() {
        ThrottleState s = new ThrottleState();
        String pad = "y".repeat(ThrottleState.MAX_PRINCIPAL - 10);
        for (int i = 0; i < 5_000; i++) {
            s.apply(b("t:User:" + i + pad), b("99000"), 0);
        }
        assertTrue(s.size() < 600);  // 2 Mi characters of about 4 ki each
        assertTrue(s.overflowing());
        assertNotNull(s.apply(b("t:" + "z".repeat(ThrottleState.MAX_KEY_BYTES)), b("1"), 0));  // skipped undecoded
    }

    @Test
    void aHeartbeatFromTheFutureIsNotObeyed() {  // issue 53: a pidquota host with a fast clock
        ThrottleState s = new ThrottleState();
        long now = 1_000_000_000L;
        s.apply(b("t:User:alice"), b(Long.toString(now + 60_000)), now);
        s.apply(b("h"), b((now + 10L * 86_400_000) + " 60000"), now);  // ten days ahead
        assertFalse(s.refuses("User:alice", now));
        assertTrue(s.openBecause(now).contains("ahead"));
        s.apply(b("h"), b((now + ThrottleState.SKEW_MS - 1000) + " 60000"), now);  // within the skew
        assertTrue(s.refuses("User:alice", now));
        assertFalse(s.fresh(now + ThrottleState.SKEW_MS + 60_000));
    }

    @Test
    void aThrottleEndsWithinTheCapWhateverItsRecordSays() {
        ThrottleState s = new ThrottleState();
        long now = 1_000_000_000L;
        s.apply(b("t:User:alice"), b(Long.toString(1L << 53)), now);
        long later = now + ThrottleState.MAX_HOLD_MS;
        s.apply(b("h"), b((later - 1000) + " 60000"), now);
        assertTrue(s.refuses("User:alice", later - 1));
        assertFalse(s.refuses("User:alice", later));
    }

    @Test
    void theSwitchIsReadAsAPersonTypesIt() {  // issue 53: switch=OFF was ignored
        ThrottleState s = new ThrottleState();
        s.apply(b("h"), b("0 60000"), 0);
        s.apply(b("t:User:alice"), b("99000"), 0);
        for (String off : new String[] {"OFF", " Off ", "off\n", "false", "0"}) {
            assertNull(s.apply(b("switch"), b(off), 0), off);
            assertFalse(s.refuses("User:alice", 1000), off);
            assertEquals("switched off", s.openBecause(1000));
            assertNull(s.apply(b("switch"), b(" ON"), 0));
            assertTrue(s.refuses("User:alice", 1000), off);
        }
        assertNotNull(s.apply(b("switch"), b("of"), 0));
        assertTrue(s.refuses("User:alice", 1000));
    }

    @Test
    void clearForgetsTheSwitchAndTheBoundToo() {  // a topic made anew starts on
        ThrottleState s = new ThrottleState();
        s.apply(b("switch"), b("off"), 0);
        s.clear();
        assertTrue(s.enabled());
        s.apply(b("h"), b("0 60000"), 0);
        s.apply(b("t:User:alice"), b("99000"), 0);
        assertTrue(s.refuses("User:alice", 1000));
    }

    private static byte[] random(Random rng) {
        byte[] out = new byte[rng.nextInt(40)];
        rng.nextBytes(out);
        return out;
    }
}
