import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.security.Permission;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.commons.cli.Option;
import org.apache.commons.cli.Options;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.tools.command.MQAdminStartup;
import org.apache.rocketmq.tools.command.SubCommand;

/**
 * mqadmin in one JVM for a whole test module: each stdin line is one command's arguments (a JSON array of
 * strings); each stdout line answers it with {"exit", "out", "err"} as the mqadmin script would have given.
 * A JVM per command costs seconds on a shared machine; MQAdminStartup.main0 is what the script runs, and its
 * only way out besides returning is System.exit (a bad command line), which is trapped here as the exit status.
 *
 * Besides mqadmin's commands: ["+options"] answers every registered command's options (the flags rmqadmin
 * must take); ["+consumer", namesrv, group, topic, instance] and ["+producer", namesrv, group, topic, instance] start a Java push
 * consumer / producer that stays online (the members consumerConnection, consumerStatus and
 * producerConnection show), answering its client id; ["+stop"] shuts them all down.
 */
public class AdminShell extends MQAdminStartup {
    static final List<DefaultMQPushConsumer> CONSUMERS = new ArrayList<>();
    static final List<DefaultMQProducer> PRODUCERS = new ArrayList<>();

    static final class Exit extends Error { // an Error: main0 catches every Exception
        final int status;

        Exit(int status) {
            this.status = status;
        }
    }

    public static void main(String[] argv) {
        try {
            serve();
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(2);
        }
    }

    @SuppressWarnings("removal")
    static void serve() throws Exception {
        PrintStream answers = System.out;
        PrintStream log = System.err;
        System.setSecurityManager(new SecurityManager() {
            @Override
            public void checkExit(int status) {
                throw new Exit(status);
            }

            @Override
            public void checkPermission(Permission perm) {
            }

            @Override
            public void checkPermission(Permission perm, Object context) {
            }
        });
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            List<String> args = JSON.parseArray(line, String.class);
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            int exit = 0;
            synchronized (AdminShell.class) {
                System.setOut(new PrintStream(out, true, "UTF-8"));
                System.setErr(new PrintStream(err, true, "UTF-8"));
                try {
                    if (args.get(0).startsWith("+")) {
                        System.out.print(special(args));
                    } else {
                        subCommandList.clear(); // fresh command objects: some keep a client, shut down after one use
                        MQAdminStartup.main0(args.toArray(new String[0]), null);
                    }
                } catch (Exit e) {
                    exit = e.status;
                } catch (Throwable t) {
                    t.printStackTrace();
                    exit = 255;
                } finally {
                    System.out.flush();
                    System.err.flush();
                    System.setOut(answers);
                    System.setErr(log);
                }
            }
            JSONObject r = new JSONObject();
            r.put("exit", exit);
            r.put("out", out.toString("UTF-8"));
            r.put("err", err.toString("UTF-8"));
            answers.println(r.toJSONString());
            answers.flush();
        }
    }

    static String special(List<String> args) throws Exception {
        switch (args.get(0)) {
            case "+options": {
                subCommandList.clear();
                initCommand();
                Map<String, List<Map<String, Object>>> all = new LinkedHashMap<>();
                for (SubCommand cmd : subCommandList) {
                    List<Map<String, Object>> opts = new ArrayList<>();
                    for (Option o : cmd.buildCommandlineOptions(new Options()).getOptions()) {
                        Map<String, Object> m = new LinkedHashMap<>();
                        m.put("opt", o.getOpt());
                        m.put("longOpt", o.getLongOpt());
                        m.put("hasArg", o.hasArg());
                        m.put("required", o.isRequired());
                        opts.add(m);
                    }
                    all.put(cmd.commandName(), opts);
                }
                return JSON.toJSONString(all);
            }
            case "+consumer": {
                DefaultMQPushConsumer c = new DefaultMQPushConsumer(args.get(2));
                c.setNamesrvAddr(args.get(1));
                c.setInstanceName(args.get(4)); // one client instance per broker under test
                c.subscribe(args.get(3), "*");
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) ->
                    ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
                c.start();
                CONSUMERS.add(c);
                return c.buildMQClientId();
            }
            case "+producer": {
                DefaultMQProducer p = new DefaultMQProducer(args.get(2));
                p.setNamesrvAddr(args.get(1));
                p.setInstanceName(args.get(4));
                p.start();
                p.fetchPublishMessageQueues(args.get(3)); // the route names the brokers it then heartbeats to
                p.getDefaultMQProducerImpl().getmQClientFactory().sendHeartbeatToAllBrokerWithLock();
                PRODUCERS.add(p);
                return p.buildMQClientId();
            }
            case "+stop": {
                CONSUMERS.forEach(DefaultMQPushConsumer::shutdown);
                PRODUCERS.forEach(DefaultMQProducer::shutdown);
                CONSUMERS.clear();
                PRODUCERS.clear();
                return "";
            }
            default:
                throw new IllegalArgumentException(args.get(0));
        }
    }
}
