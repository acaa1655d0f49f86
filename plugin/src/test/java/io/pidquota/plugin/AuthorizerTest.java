package io.pidquota.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Optional;
import org.apache.kafka.common.Endpoint;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import org.junit.jupiter.api.Test;

class AuthorizerTest {
    /** A principal class that says something else in toString (as Strimzi's OAuth principal does). */
    static final class OAuthLike extends KafkaPrincipal {
        OAuthLike(String name) {
            super(KafkaPrincipal.USER_TYPE, name);
        }

        @Override
        public String toString() {
            return "OAuthKafkaPrincipal(User:" + getName() + ", groups: null, session: 42)";
        }
    }

    @Test
    void aPrincipalIsNamedByItsTypeAndName() {  // issue 53: toString() hid OAuth users
        assertEquals("User:alice", PidQuotaAuthorizer.nameOf(new OAuthLike("alice")));
        assertEquals("User:bob", PidQuotaAuthorizer.nameOf(new KafkaPrincipal("User", "bob")));
    }

    @Test
    void anEndpointsListenerIsReadWithoutTheDeprecatedCallWhereTheBrokerHasTheNewOne() {
        Endpoint e = new Endpoint("CONTROLLER", SecurityProtocol.PLAINTEXT, "127.0.0.1", 9093);
        assertEquals("CONTROLLER", PidQuotaAuthorizer.listenerOf(e));
        assertEquals(Optional.of("CONTROLLER"), e.listenerName());
    }

    @Test
    void theCheckIntervalIsReadAsGivenWithinItsRangeElseTheDefault() {
        assertEquals(5_000L, PidQuotaAuthorizer.checkMs(null));
        assertEquals(5_000L, PidQuotaAuthorizer.checkMs(" "));
        assertEquals(1_000L, PidQuotaAuthorizer.checkMs(" 1000 "));
        assertEquals(200L, PidQuotaAuthorizer.checkMs("200"));
        assertEquals(60_000L, PidQuotaAuthorizer.checkMs(60_000));
        for (Object wrong : new Object[] {"199", "60001", "1s", "-5", "1e3", "9999999999999999999999"}) {
            assertEquals(5_000L, PidQuotaAuthorizer.checkMs(wrong), String.valueOf(wrong));
        }
    }
}
