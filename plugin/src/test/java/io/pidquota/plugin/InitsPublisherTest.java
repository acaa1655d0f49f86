package io.pidquota.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetAddress;
import java.util.Collections;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.authorizer.AuthorizationResult;
import org.junit.jupiter.api.Test;

class InitsPublisherTest {
    static AuthorizableRequestContext context(String user, String clientId) {
        return new AuthorizableRequestContext() {
            public String listenerName() {
                return "PLAINTEXT";
            }

            public org.apache.kafka.common.security.auth.SecurityProtocol securityProtocol() {
                return org.apache.kafka.common.security.auth.SecurityProtocol.PLAINTEXT;
            }

            public KafkaPrincipal principal() {
                return new KafkaPrincipal("User", user);
            }

            public InetAddress clientAddress() {
                return InetAddress.getLoopbackAddress();
            }

            public int requestType() {
                return 22;
            }

            public int requestVersion() {
                return 4;
            }

            public String clientId() {
                return clientId;
            }

            public int correlationId() {
                return 1;
            }
        };
    }

    static InitsPublisher publisher() {
        return new InitsPublisher("inits", 7, Collections.singletonMap("bootstrap.servers", "127.0.0.1:1"), "t");
    }

    @Test
    void aRecordIsOneLineOfJsonWithEveryTextEscaped() {
        InitsPublisher p = publisher();
        InitsPublisher.Seen s = new InitsPublisher.Seen(1000, 3, "User:a\"b\\c",
            "id\n\u0001x", InetAddress.getLoopbackAddress(), "SASL", "tx-\ud800", InitsPublisher.Outcome.GRANTED, null);
        String json = p.json(s);
        assertTrue(json.startsWith("{\"v\":1,\"at_ms\":1000,\"broker\":7,\"run\":\""), json);
        assertTrue(json.contains("\"seq\":3,\"principal\":\"User:a\\\"b\\\\c\",\"client_id\":\"id\\u000a\\u0001x\""), json);
        assertTrue(json.contains("\"client_address\":\"127.0.0.1\",\"listener\":\"SASL\""), json);
        assertTrue(json.contains("\"transactional_id\":\"tx-\\ufffd\",\"outcome\":\"granted\",\"software\":null}"), json);
        assertEquals(-1, json.indexOf('\n'));
    }

    @Test
    void theQueueIsBoundedAndAFullOneDropsAndCountsWithoutBlocking() {
        InitsPublisher p = publisher();  // not started: nothing drains
        AuthorizableRequestContext c = context("crash", "app");
        p.offer(c, null, InitsPublisher.Outcome.GRANTED);
        assertEquals(0, p.queued(), "nothing is queued before the topic is seen");
        p.ready(true);
        for (int i = 0; i < InitsPublisher.CAPACITY + 5; i++) {
            p.offer(c, null, InitsPublisher.Outcome.GRANTED);
        }
        assertEquals(InitsPublisher.CAPACITY, p.queued());
        assertEquals(5, p.dropped());
    }

    @Test
    void theQueuesTextIsBoundedToo() {
        InitsPublisher p = publisher();
        p.ready(true);
        String big = new String(new char[30_000]).replace('\0', 'x');
        for (int i = 0; i < 200; i++) {
            p.offer(context("crash", big), big, InitsPublisher.Outcome.GRANTED);
        }
        assertTrue(p.queued() * 60_000L <= InitsPublisher.MAX_CHARS, "queued " + p.queued());
        assertEquals(200 - p.queued(), p.dropped());
    }

    @Test
    void aSendTakesAllThatWaitsNotOneBatchOfIt() {
        InitsPublisher p = publisher();
        p.ready(true);
        AuthorizableRequestContext c = context("crash", "app");
        for (int i = 0; i < 5 * InitsPublisher.BATCH; i++) {
            p.offer(c, null, InitsPublisher.Outcome.GRANTED);
        }
        p.ready(false);  // the topic gone meanwhile: counted, never sent (no producer is made)
        p.sendWaiting(new java.util.ArrayList<>());
        assertEquals(0, p.queued());
        assertEquals(5 * InitsPublisher.BATCH, p.failed());  // a flood over 2,000 inits a second kept up
    }

    @Test
    void sendsGoAtOnceWithinTheBudgetAndAtOneAGatherBeyondIt() {
        InitsPublisher p = publisher();
        long g = InitsPublisher.GATHER_NANOS;
        long t = System.nanoTime() + 1000 * g;  // after a quiet spell: the budget full
        for (int i = 0; i < InitsPublisher.BURST; i++) {
            assertEquals(0, p.take(t, true), "send " + i + " of the burst");
        }
        assertEquals(g, p.take(t, true));  // the budget spent: the next send waits a whole gather
        assertEquals(g / 2, p.take(t + g / 2, true));
        assertEquals(0, p.take(t + g, true));
        for (int i = 2; i < 10; i++) {  // a flood: one send a gather, never more
            assertTrue(p.take(t + i * g - 1, true) > 0);
            assertEquals(0, p.take(t + i * g, true));
        }
        long quiet = t + 100 * g;  // a long quiet spell refills BURST sends, not more
        for (int i = 0; i < InitsPublisher.BURST; i++) {
            assertEquals(0, p.take(quiet, true));
        }
        assertEquals(g, p.take(quiet, true));
        assertEquals(g, p.take(quiet - g, true));  // a clock read out of order gives nothing
        assertEquals(g, p.take(quiet, true));  // and takes nothing back
    }

    @Test
    void refusedInitsLeaveASendInTheBudgetForAGrantedOne() {
        InitsPublisher p = publisher();
        long g = InitsPublisher.GATHER_NANOS;
        long t = System.nanoTime() + 1000 * g;
        for (int i = 0; i < InitsPublisher.BURST - 1; i++) {
            assertEquals(0, p.take(t, false), "refused send " + i);
        }
        assertEquals(g, p.take(t, false));  // the last send is kept
        assertEquals(0, p.take(t, true));  // for a granted init, at once
        assertEquals(2 * g, p.take(t, false));
        assertEquals(g, p.take(t, true));
        for (int i = 2; i < 10; i++) {  // refused retries alone: one send a gather, one kept back
            assertTrue(p.take(t + i * g - 1, false) > 0);
            assertEquals(0, p.take(t + i * g, false));
        }
        assertEquals(0, p.take(t + 9 * g, true));
    }

    @Test
    void anOutcomeSaysWhoDecided() {
        assertEquals(InitsPublisher.Outcome.REFUSED, PidQuotaAuthorizer.outcome(true, AuthorizationResult.ALLOWED));
        assertEquals(InitsPublisher.Outcome.GRANTED, PidQuotaAuthorizer.outcome(false, AuthorizationResult.ALLOWED));
        assertEquals(InitsPublisher.Outcome.DENIED, PidQuotaAuthorizer.outcome(false, AuthorizationResult.DENIED));
    }

    @Test
    void aContextWithoutClientInformationHasNoSoftware() {
        assertNull(InitsPublisher.software(context("a", "b")));
    }
}
