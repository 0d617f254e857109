import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * TransactionMQProducer scenarios. ``--outcomes`` gives each message's local transaction result
 * (commit, rollback, unknown); ``--check`` what the producer answers when the broker checks back.
 * ``tx-send --crash true`` leaves its unknown transactions behind (the JVM halts without shutdown);
 * ``tx-check`` is the producer started again in the same group, answering the broker's check-backs.
 */
final class Tx {
    private Tx() {
    }

    /** The messages the broker checked, by index (the first check of each). */
    static final Map<Integer, MessageExt> checked = new TreeMap<>();

    static LocalTransactionState state(String s) {
        switch (s) {
            case "commit": return LocalTransactionState.COMMIT_MESSAGE;
            case "rollback": return LocalTransactionState.ROLLBACK_MESSAGE;
            default: return LocalTransactionState.UNKNOW;
        }
    }

    static TransactionMQProducer producer(String[] outcomes) throws Exception {
        TransactionMQProducer p = new TransactionMQProducer(Driver.opt("group"), Driver.rpcHook());
        p.setNamesrvAddr(Driver.opt("ns"));
        p.setInstanceName("tx-" + System.nanoTime());
        LocalTransactionState answer = state(Driver.opt("check", "unknown"));
        p.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return state(outcomes[Integer.parseInt(msg.getUserProperty("idx"))]);
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                synchronized (checked) {
                    checked.putIfAbsent(Integer.parseInt(msg.getUserProperty("idx")), msg);
                }
                return answer;
            }
        });
        p.start();
        return p;
    }

    static void awaitChecks(int expect) throws Exception {
        long end = Driver.deadline();
        while (System.currentTimeMillis() < end) {
            synchronized (checked) {
                if (checked.size() >= expect) {
                    break;
                }
            }
            Thread.sleep(100);
        }
        synchronized (checked) {
            for (Map.Entry<Integer, MessageExt> e : checked.entrySet()) {
                Driver.emit("checked", "idx", e.getKey(), "message", Driver.message(e.getValue()));
            }
        }
    }

    static void send() throws Exception {
        String topic = Driver.opt("topic");
        String[] outcomes = Driver.opt("outcomes").split(",");
        Driver.createTopic(topic);
        TransactionMQProducer p = producer(outcomes);
        int commits = 0;
        for (int i = 0; i < outcomes.length; i++) {
            TransactionSendResult r = p.sendMessageInTransaction(Driver.numbered(topic, i), null);
            Map<String, Object> rec = Driver.sendResult(r);
            rec.put("localTransactionState", String.valueOf(r.getLocalTransactionState()));
            Driver.emit("send", "idx", i, "result", rec);
            commits += outcomes[i].equals("commit") ? 1 : 0;
        }
        if (Boolean.parseBoolean(Driver.opt("crash", "false"))) {
            // the committed ones are readable once the (oneway) end-transaction requests were served
            Driver.readBack(topic, null, commits);
            Thread.sleep(500);  // the rollbacks' oneway requests leave the socket; then no shutdown at all
            System.out.flush();
            Runtime.getRuntime().halt(0);
        }
        awaitChecks(Driver.intOpt("checks", 0));
        p.shutdown();
        Driver.readBack(topic, null, Driver.intOpt("expect", commits));
    }

    static void check() throws Exception {
        String topic = Driver.opt("topic");
        TransactionMQProducer p = producer(new String[0]);
        awaitChecks(Driver.intOpt("checks", 1));
        p.shutdown();
        Driver.readBack(topic, null, Driver.intOpt("expect", 0));
    }
}
